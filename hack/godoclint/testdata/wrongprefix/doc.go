// This package's comment does not start with "Package wrongprefix".
package wrongprefix

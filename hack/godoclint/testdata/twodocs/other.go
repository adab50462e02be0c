// Package twodocs has another one here, which godoc would append.
package twodocs

package fuzzinput

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// RandomSpec returns a random Spec drawn towards the CRD's edges: names of
// one and of the maximum length, sixteen ports, port 65535, every protocol,
// every kind of resource name and quantity the schema lets through, images
// with characters a registry would never use. About one in eight breaks a
// CRD rule on purpose (a 64-character name, an upper-case letter, seventeen
// ports, ...), so that a caller can also check that the API server rejects
// what CRDAccepts rejects.
func RandomSpec(r *rand.Rand) Spec {
	s := Spec{
		Name:       dnsSubdomain(r, pickLength(r, maxNameLength)),
		ProfileRef: dnsSubdomain(r, pickLength(r, maxProfileRefLength)),
		Image:      randomImage(r),
		Replicas:   pick(r, -1, 0, 1, maxReplicas, int32(r.IntN(maxReplicas+1))),
		Ports:      randomPorts(r, pick(r, 0, 1, 2, maxPorts, r.IntN(maxPorts+1))),
		Requests:   randomResources(r),
		Limits:     randomLimits(r),
	}
	if r.IntN(4) == 0 {
		// Another namespace's profile, as a grant permits it.
		s.ProfileRef = dnsLabel(r, pickLength(r, maxNamespaceLength)) + "/" + s.ProfileRef
	}
	if r.IntN(8) == 0 {
		breakRule(r, &s)
	}
	return s
}

// breakRule makes s break one CRD rule.
func breakRule(r *rand.Rand, s *Spec) {
	switch r.IntN(11) {
	case 9:
		s.ProfileRef = dnsLabel(r, maxNamespaceLength+1) + "/arena"
	case 10:
		s.ProfileRef = "a.b/arena" // a namespace is a DNS label: no dot
	case 0:
		s.Name = dnsSubdomain(r, maxNameLength+1)
	case 1:
		s.Name = "Upper-" + s.Name
	case 2:
		s.ProfileRef = dnsSubdomain(r, maxProfileRefLength+1)
	case 3:
		s.ProfileRef = "under_score"
	case 4:
		s.Image = "registry.example.com/arena server:1"
	case 5:
		s.Replicas = maxReplicas + 1
	case 6:
		s.Ports = randomPorts(r, maxPorts+1)
	case 7:
		s.Ports = "game:7777,dup:7777/UDP" // the default protocol counts
	case 8:
		s.Ports = "Game:7777"
	}
}

func pick[T any](r *rand.Rand, choices ...T) T { return choices[r.IntN(len(choices))] }

// pickLength favours the edges: 1, 2, max-1 and max.
func pickLength(r *rand.Rand, max int) int {
	return pick(r, 1, 2, max-1, max, 1+r.IntN(max), 1+r.IntN(max))
}

const (
	lowerAlnum     = "abcdefghijklmnopqrstuvwxyz0123456789"
	lowerAlnumDash = lowerAlnum + "-"
)

func randomString(r *rand.Rand, alphabet string, n int) string {
	var b strings.Builder
	for range n {
		b.WriteByte(alphabet[r.IntN(len(alphabet))])
	}
	return b.String()
}

// dnsLabel returns a DNS-1123 label of n characters (n >= 1).
func dnsLabel(r *rand.Rand, n int) string {
	if n <= 2 {
		return randomString(r, lowerAlnum, n)
	}
	return randomString(r, lowerAlnum, 1) + randomString(r, lowerAlnumDash, n-2) + randomString(r, lowerAlnum, 1)
}

// dnsSubdomain returns a DNS-1123 subdomain of exactly n characters:
// labels of up to 63 characters joined by dots.
func dnsSubdomain(r *rand.Rand, n int) string {
	var labels []string
	for n > 0 {
		l := min(n, 1+r.IntN(63))
		if n-l == 1 {
			// A single character left could only be a dot.
			l--
		}
		if l == 0 {
			l = n
		}
		labels = append(labels, dnsLabel(r, l))
		n -= l + 1
	}
	return strings.Join(labels, ".")
}

func randomImage(r *rand.Rand) string {
	repo := "registry.example.com/" + dnsLabel(r, 1+r.IntN(20)) + "/" + dnsLabel(r, 1+r.IntN(20))
	switch r.IntN(16) {
	case 0:
		return repo + "@sha256:" + randomString(r, "0123456789abcdef", 64)
	case 1:
		// 512 ASCII characters, the longest image the CRD takes.
		return repo + "/" + randomString(r, lowerAlnum, maxImageLength-len(repo)-1)
	case 2:
		// 512 characters but more bytes: maxLength counts characters.
		return strings.Repeat("é", maxImageLength)
	case 3:
		return "Registry.Example.COM/Arena:LATEST"
	case 4:
		return "ゲーム/サーバー:1"
	case 5:
		// Spaces outside RE2's \s, which the CRD's rule does not catch.
		return pick(r, "\v", "\u00a0", "\u2003", "\u3000") + repo + ":1"
	case 6:
		return "a"
	default:
		return repo + ":" + fmt.Sprintf("%d.%d.%d", r.IntN(10), r.IntN(100), r.IntN(1000))
	}
}

// randomPorts returns n ports with distinct names and distinct
// number/protocol pairs: names of one to fifteen characters of the CRD's
// pattern, numbers at 1, 65535 and between, every protocol or none.
func randomPorts(r *rand.Rand, n int) string {
	names := map[string]bool{}
	type numberProtocol struct {
		number   int
		protocol string
	}
	pairs := map[numberProtocol]bool{}
	var items []string
	for len(items) < n {
		name := dnsLabel(r, pick(r, 1, maxPortNameLength, 1+r.IntN(maxPortNameLength)))
		number := pick(r, 1, 65535, 1+r.IntN(65535))
		protocol := pick(r, "", "UDP", "TCP", "SCTP")
		key := numberProtocol{number, protocol}
		if key.protocol == "" {
			key.protocol = "UDP"
		}
		if names[name] || pairs[key] {
			continue
		}
		names[name], pairs[key] = true, true
		item := fmt.Sprintf("%s:%d", name, number)
		if protocol != "" {
			item += "/" + protocol
		}
		items = append(items, item)
	}
	return strings.Join(items, ",")
}

// resourceNames are the resources the CRD allows; otherResourceNames are
// names a ResourceList can have that the CRD refuses (huge pages, extended
// resources, names no Pod would take), drawn now and then to check that it
// does.
var (
	resourceNames      = []string{"cpu", "memory", "ephemeral-storage"}
	otherResourceNames = []string{"hugepages-2Mi", "example.com/gpu", "gpu", "kubernetes.io/slot", "Memory"}
)

func randomResources(r *rand.Rand) string {
	n := pick(r, 0, 0, 1, 2, len(resourceNames), r.IntN(len(resourceNames)+1))
	var items []string
	for _, i := range r.Perm(len(resourceNames))[:n] {
		items = append(items, resourceNames[i]+"="+randomQuantity(r))
	}
	if r.IntN(32) == 0 {
		items = append(items, pick(r, otherResourceNames...)+"="+randomQuantity(r))
	}
	return strings.Join(items, ",")
}

// randomLimits are mostly unset, as in most specs; set, they may well be below
// a request, which the CRD refuses.
func randomLimits(r *rand.Rand) string {
	if r.IntN(8) != 0 {
		return ""
	}
	return randomResources(r)
}

func randomQuantity(r *rand.Rand) string {
	if r.IntN(64) == 0 {
		return fmt.Sprintf("-%d", 1+r.IntN(8)) // refused: negative
	}
	n := r.IntN(4096)
	return pick(r,
		fmt.Sprintf("%dm", n), fmt.Sprintf("%dMi", n), fmt.Sprintf("%dGi", n%64), fmt.Sprint(n%16),
		"0", "1", "1e3", "1.5", "100k", "1Ei", "0.5m")
}

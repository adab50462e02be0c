package controlplane

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

const (
	modulePath = "github.com/example/gamesession-controller"
	dirPrefix  = "gamesession-controlplane-"
	ownerFile  = "owner" // "<pid> <hostname>" of the process that created the dir
	keepMarker = "kept"  // present when the dir was kept on purpose for inspection
)

type binaries struct {
	etcd, apiserver, controllerManager, scheduler, kwok, kwokStages string
}

// findBinaries resolves the binaries the options need and fails with
// ErrBinariesMissing naming every absent one.
func findBinaries(opts Options) (binaries, error) {
	dir := opts.BinDir
	if dir == "" {
		dir = os.Getenv(EnvBinDir)
	}
	if dir == "" {
		root, err := repoRoot()
		if err != nil {
			return binaries{}, fmt.Errorf("%w; or set %s", err, EnvBinDir)
		}
		dir = filepath.Join(root, "bin", "controlplane")
	}
	b := binaries{
		etcd:              filepath.Join(dir, "etcd"),
		apiserver:         filepath.Join(dir, "kube-apiserver"),
		controllerManager: filepath.Join(dir, "kube-controller-manager"),
		scheduler:         filepath.Join(dir, "kube-scheduler"),
		kwok:              filepath.Join(dir, "kwok"),
		kwokStages:        filepath.Join(dir, "kwok-stages.yaml"),
	}
	// `go build` names etcd's main package (go.etcd.io/etcd/server/v3) "server".
	if !isExecutable(b.etcd) && isExecutable(filepath.Join(dir, "server")) {
		b.etcd = filepath.Join(dir, "server")
	}
	need := []string{b.etcd, b.apiserver}
	if opts.ControllerManager {
		need = append(need, b.controllerManager)
	}
	if opts.Nodes > 0 {
		need = append(need, b.scheduler, b.kwok)
	}
	var missing []string
	for _, p := range need {
		if !isExecutable(p) {
			missing = append(missing, p)
		}
	}
	if opts.Nodes > 0 {
		if _, err := os.Stat(b.kwokStages); err != nil {
			missing = append(missing, b.kwokStages)
		}
	}
	if len(missing) > 0 {
		return binaries{}, fmt.Errorf("%w\n  missing: %s", ErrBinariesMissing, strings.Join(missing, "\n  missing: "))
	}
	return b, nil
}

func isExecutable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0
}

// repoRoot walks up from the working directory (a package directory under
// `go test`) to the go.mod of this module.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if moduleOf(filepath.Join(dir, "go.mod")) == modulePath {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of module %s above the working directory", modulePath)
		}
		dir = parent
	}
}

func moduleOf(goMod string) string {
	f, err := os.Open(goMod)
	if err != nil {
		return ""
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(s.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}

// newTempDir creates the control plane's directory and records its owner,
// so that a later run can recognise it as stale once the owner is gone.
func newTempDir() (string, error) {
	dir, err := os.MkdirTemp("", dirPrefix)
	if err != nil {
		return "", err
	}
	host, _ := os.Hostname()
	owner := fmt.Sprintf("%d %s", os.Getpid(), host)
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(owner), 0o644); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// sweepStaleDirs removes directories left by test binaries that died without
// running Stop (a `go test -timeout` panic, SIGKILL). Their processes are
// already gone thanks to Pdeathsig; only the files remain. Directories of live
// owners, of other hosts sharing /tmp, or kept on purpose are left alone.
func sweepStaleDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	host, _ := os.Hostname()
	for _, dir := range dirs {
		if _, err := os.Stat(filepath.Join(dir, keepMarker)); err == nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue // being created right now, or not ours
		}
		pidText, ownerHost, _ := strings.Cut(string(data), " ")
		pid, err := strconv.Atoi(pidText)
		if err != nil || ownerHost != host || processAlive(pid) {
			continue
		}
		_ = os.RemoveAll(dir)
	}
}

type authFiles struct {
	saPrivateKey, saPublicKey, tokenFile string
	adminToken                           string
}

// writeAuthFiles writes the service account signing key pair and a static
// token file whose only user, admin, is in system:masters.
func writeAuthFiles(dir string) (authFiles, error) {
	f := authFiles{
		saPrivateKey: filepath.Join(dir, "sa.key"),
		saPublicKey:  filepath.Join(dir, "sa.pub"),
		tokenFile:    filepath.Join(dir, "tokens.csv"),
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return f, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return f, err
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})
	token := make([]byte, 32)
	if _, err := rand.Read(token); err != nil {
		return f, err
	}
	f.adminToken = hex.EncodeToString(token)
	// Format: token,user,uid,"group1,group2".
	tokens := fmt.Sprintf("%s,admin,admin,\"system:masters\"\n", f.adminToken)
	for path, data := range map[string][]byte{f.saPrivateKey: keyPEM, f.saPublicKey: pubPEM, f.tokenFile: []byte(tokens)} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return f, err
		}
	}
	return f, nil
}

// freePorts returns n distinct free ports on 127.0.0.1. Holding all listeners
// until every port is known keeps the kernel from handing one out twice.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// noProxy is a plain client for etcd that never consults proxy variables.
var noProxy = &http.Client{Transport: &http.Transport{Proxy: nil}}

func etcdHealthy(ctx context.Context, url string) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/health", nil)
	if err != nil {
		return false, err
	}
	resp, err := noProxy.Do(req)
	if err != nil {
		return false, nil // not listening yet
	}
	defer resp.Body.Close()
	var h struct {
		Health string `json:"health"`
	}
	return json.NewDecoder(resp.Body).Decode(&h) == nil && h.Health == "true", nil
}

// readServingCA reads the bundle the apiserver writes when it self-signs its
// serving certificate (the leaf, then the CA that signed it) and returns the
// CA certificates as PEM. ok is false while the file is missing or still
// being written.
func readServingCA(path string) (caPEM []byte, ok bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, false
	}
	rest := data
	var all, cas []byte
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, false
		}
		all = append(all, pem.EncodeToMemory(block)...)
		if cert.IsCA {
			cas = append(cas, pem.EncodeToMemory(block)...)
		}
	}
	// Anything left over means the file is still being written.
	if len(all) == 0 || len(bytes.TrimSpace(rest)) > 0 {
		return nil, false
	}
	// Only CA certificates are valid roots for consumers such as the
	// controller manager's ClusterTrustBundle publisher; a bundle without one
	// is trusted as a whole.
	if len(cas) == 0 {
		return all, true
	}
	return cas, true
}

// writeKubeconfig writes an admin kubeconfig (used by kubectl and by the
// components) with the CA embedded, so it stays valid if copied elsewhere.
func writeKubeconfig(path, server string, caData []byte, token string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["gamesession"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caData}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["gamesession"] = &clientcmdapi.Context{Cluster: "gamesession", AuthInfo: "admin", Namespace: "default"}
	cfg.CurrentContext = "gamesession"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}

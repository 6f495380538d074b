package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// authority is a self-signed certificate authority that signs the control plane's certificates.
type authority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// certRequest describes one certificate to issue.
type certRequest struct {
	name     string // file stem: <name>.crt and <name>.key
	cn       string
	orgs     []string
	server   bool
	dnsNames []string
	ips      []net.IP
}

func newKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
}

// newAuthority makes a CA and writes it to dir/<name>.crt and .key.
func newAuthority(dir, name string) (*authority, error) {
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("self-sign %s: %w", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	if err := writePair(dir, name, der, key); err != nil {
		return nil, err
	}
	return &authority{cert: cert, key: key}, nil
}

// issue signs a certificate for req and writes it to dir.
func (a *authority) issue(dir string, req certRequest) error {
	key, err := newKey()
	if err != nil {
		return err
	}
	sn, err := serial()
	if err != nil {
		return err
	}
	usage := x509.ExtKeyUsageClientAuth
	if req.server {
		usage = x509.ExtKeyUsageServerAuth
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: req.cn, Organization: req.orgs},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().AddDate(10, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     req.dnsNames,
		IPAddresses:  req.ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		return fmt.Errorf("sign %s: %w", req.name, err)
	}
	return writePair(dir, req.name, der, key)
}

func writePair(dir, name string, der []byte, key *ecdsa.PrivateKey) error {
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := writePEM(filepath.Join(dir, name+".crt"), "CERTIFICATE", der); err != nil {
		return err
	}
	return writePEM(filepath.Join(dir, name+".key"), "EC PRIVATE KEY", keyDER)
}

func writePEM(path, kind string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600)
}

// writeServiceAccountKeys writes the key pair that signs and verifies service-account tokens.
func writeServiceAccountKeys(dir string) error {
	key, err := newKey()
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := writePEM(filepath.Join(dir, "sa.key"), "EC PRIVATE KEY", keyDER); err != nil {
		return err
	}
	return writePEM(filepath.Join(dir, "sa.pub"), "PUBLIC KEY", pubDER)
}

// writeCertificates lays down every certificate and key the control plane needs, and when
// nodeName is set those of that node's kubelet: its client certificate in the Node authorizer's
// terms (system:node:<name> in system:nodes) and its serving certificate for 127.0.0.1.
func writeCertificates(dir, nodeName string) error {
	ca, err := newAuthority(dir, "ca")
	if err != nil {
		return err
	}
	proxyCA, err := newAuthority(dir, "front-proxy-ca")
	if err != nil {
		return err
	}
	loopback := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(serviceIP)}
	requests := []struct {
		ca  *authority
		req certRequest
	}{
		{ca, certRequest{name: "apiserver", cn: "kube-apiserver", server: true, ips: loopback,
			dnsNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
				"kubernetes.default.svc.cluster.local"}}},
		{ca, certRequest{name: "admin", cn: "shutter-admin", orgs: []string{"system:masters"}}},
		{proxyCA, certRequest{name: "front-proxy-client", cn: "front-proxy-client"}},
		// kube-apiserver's identity towards kubelets (logs, exec), which trust the cluster's CA.
		{ca, certRequest{name: "apiserver-kubelet-client", cn: "kube-apiserver-kubelet-client",
			orgs: []string{"system:masters"}}},
	}
	if nodeName != "" {
		requests = append(requests, []struct {
			ca  *authority
			req certRequest
		}{
			{ca, certRequest{name: "node", cn: "system:node:" + nodeName, orgs: []string{"system:nodes"}}},
			{ca, certRequest{name: "kubelet-serving", cn: nodeName, server: true,
				ips: []net.IP{net.ParseIP("127.0.0.1")}, dnsNames: []string{"localhost"}}},
		}...)
	}
	for _, r := range requests {
		if err := r.ca.issue(dir, r.req); err != nil {
			return err
		}
	}
	return writeServiceAccountKeys(dir)
}

// loadAuthority reads the CA that newAuthority wrote to dir/<name>.crt and .key.
func loadAuthority(dir, name string) (*authority, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, name+".crt"))
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, name+".key"))
	if err != nil {
		return nil, err
	}
	certBlock, _ := pem.Decode(certPEM)
	keyBlock, _ := pem.Decode(keyPEM)
	if certBlock == nil || keyBlock == nil {
		return nil, fmt.Errorf("%s: no PEM", name)
	}
	cert, err := x509.ParseCertificate(certBlock.Bytes)
	if err != nil {
		return nil, err
	}
	key, err := x509.ParseECPrivateKey(keyBlock.Bytes)
	if err != nil {
		return nil, err
	}
	return &authority{cert: cert, key: key}, nil
}

// writeNodeCertificates writes into nodeDir the certificates of the kubelet of node name (an
// address), signed by the cluster's CA in dir, and a copy of the CA's certificate.
func writeNodeCertificates(dir, nodeDir, name string) error {
	ca, err := loadAuthority(dir, "ca")
	if err != nil {
		return err
	}
	for _, req := range []certRequest{
		{name: "node", cn: "system:node:" + name, orgs: []string{"system:nodes"}},
		{name: "kubelet-serving", cn: name, server: true, ips: []net.IP{net.ParseIP(name), net.ParseIP("127.0.0.1")}, dnsNames: []string{"localhost"}},
	} {
		if err := ca.issue(nodeDir, req); err != nil {
			return err
		}
	}
	return writePEM(filepath.Join(nodeDir, "ca.crt"), "CERTIFICATE", ca.cert.Raw)
}

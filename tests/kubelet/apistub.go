package kubelet

// A stub Kubernetes API server over HTTPS for the node label tests: a CA and a server
// certificate for 127.0.0.1 made at start, every request recorded, the answer to each decided
// by the test (a status and body, or no answer at all until the client gives up).

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// ServiceAccountDir is where kubelet mounts a pod's service account (under the test root).
const ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// APIRequest is one request the stub received and what it answered (Status 0: no answer).
type APIRequest struct {
	Time          time.Time
	Method        string
	Path          string
	Proto         string
	ContentType   string
	Accept        string
	Authorization string
	UserAgent     string
	Body          []byte
	Status        int
}

// APIAnswer is the stub's answer to one request. Hang: no answer until the client goes away
// (or the stub closes); Hold: wait for the channel to close first, then answer; Chunked: the
// body in two chunks (Transfer-Encoding: chunked) instead of with a Content-Length.
type APIAnswer struct {
	Status  int
	Body    string
	Hang    bool
	Hold    <-chan struct{}
	Chunked bool
}

// StubCert is what the stub's server certificate names and its keys. Host is the address or
// name clients are told to connect to (127.0.0.1 when empty); the stub listens on 127.0.0.1.
type StubCert struct {
	IPs  []net.IP
	DNS  []string
	RSA  bool // RSA 2048 keys (kubeadm's default) instead of ECDSA P-256
	Host string
}

// APIStub is a running stub API server on 127.0.0.1.
type APIStub struct {
	Host  string // what clients connect to: "127.0.0.1" unless StubCert.Host says otherwise
	Port  int
	CAPEM []byte // the CA that signed the server certificate

	answer  func(n int, r *APIRequest) APIAnswer
	srv     *http.Server
	closing chan struct{}
	served  chan struct{}
	mu      sync.Mutex
	reqs    []APIRequest
}

// StartAPIStub serves HTTPS on a random port of 127.0.0.1 with a certificate for 127.0.0.1.
// answer is called for the n-th request (from 1), after the request was recorded.
func StartAPIStub(answer func(n int, r *APIRequest) APIAnswer) (*APIStub, error) {
	return StartAPIStubWith(StubCert{IPs: []net.IP{net.ParseIP("127.0.0.1")}}, answer)
}

// StartAPIStubWith is StartAPIStub with the certificate c describes.
func StartAPIStubWith(c StubCert, answer func(n int, r *APIRequest) APIAnswer) (*APIStub, error) {
	caPEM, cert, err := newServerCert(c)
	if err != nil {
		return nil, err
	}
	host := c.Host
	if host == "" {
		host = "127.0.0.1"
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &APIStub{Host: host, Port: ln.Addr().(*net.TCPAddr).Port, CAPEM: caPEM, answer: answer,
		closing: make(chan struct{}), served: make(chan struct{})}
	s.srv = &http.Server{
		Handler:   http.HandlerFunc(s.handle),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ErrorLog:  log.New(io.Discard, "", 0), // handshake failures are expected in some tests
	}
	go func() {
		defer close(s.served)
		s.srv.ServeTLS(ln, "", "") //nolint:errcheck // ends with ErrServerClosed
	}()
	return s, nil
}

// Addr is "127.0.0.1:<port>"; PortString the port alone.
func (s *APIStub) Addr() string       { return net.JoinHostPort(s.Host, s.PortString()) }
func (s *APIStub) PortString() string { return strconv.Itoa(s.Port) }

// Requests returns a copy of the requests received so far.
func (s *APIStub) Requests() []APIRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]APIRequest(nil), s.reqs...)
}

// Close stops serving; hung requests are released.
func (s *APIStub) Close() {
	select {
	case <-s.closing:
		return
	default:
	}
	close(s.closing)
	s.srv.Close()
	<-s.served
}

func (s *APIStub) handle(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	req := APIRequest{Time: time.Now(), Method: r.Method, Path: r.URL.Path, Proto: r.Proto,
		ContentType: r.Header.Get("Content-Type"), Accept: r.Header.Get("Accept"),
		Authorization: r.Header.Get("Authorization"), UserAgent: r.Header.Get("User-Agent"), Body: body}
	s.mu.Lock()
	s.reqs = append(s.reqs, req)
	n := len(s.reqs)
	s.mu.Unlock()

	a := s.answer(n, &req)
	if a.Hang {
		select {
		case <-r.Context().Done():
		case <-s.closing:
		}
		return
	}
	if a.Hold != nil {
		select {
		case <-a.Hold:
		case <-r.Context().Done():
			return
		case <-s.closing:
			return
		}
	}
	s.mu.Lock()
	s.reqs[n-1].Status = a.Status
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.Status)
	if a.Chunked && len(a.Body) > 1 {
		io.WriteString(w, a.Body[:len(a.Body)/2]) //nolint:errcheck
		w.(http.Flusher).Flush()
		io.WriteString(w, a.Body[len(a.Body)/2:]) //nolint:errcheck
		return
	}
	io.WriteString(w, a.Body) //nolint:errcheck
}

// WriteServiceAccount writes <root>/var/run/secrets/kubernetes.io/serviceaccount/{token,ca.crt}.
func WriteServiceAccount(root, token string, caPEM []byte) error {
	dir := filepath.Join(root, ServiceAccountDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := WriteToken(root, token); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "ca.crt"), caPEM, 0o644)
}

// WriteToken replaces the token file atomically, as kubelet does when it rotates a projected
// token (write a new file, then rename).
func WriteToken(root, token string) error {
	dir := filepath.Join(root, ServiceAccountDir)
	tmp := filepath.Join(dir, ".token.tmp")
	if err := os.WriteFile(tmp, []byte(token), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, "token"))
}

// NewTestCA returns a fresh self-signed CA certificate (PEM) that signed nothing the stub uses.
func NewTestCA() ([]byte, error) {
	caPEM, _, err := newServerCert(StubCert{IPs: []net.IP{net.ParseIP("127.0.0.1")}})
	return caPEM, err
}

// newKey is an ECDSA P-256 key, or RSA 2048 with rsa set.
func newKey(rsaKey bool) (crypto.Signer, error) {
	if rsaKey {
		return rsa.GenerateKey(rand.Reader, 2048)
	}
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

// newServerCert makes a CA and a server certificate for c's names signed by it.
func newServerCert(c StubCert) ([]byte, tls.Certificate, error) {
	var none tls.Certificate
	caKey, err := newKey(c.RSA)
	if err != nil {
		return nil, none, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "sdp test API server CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return nil, none, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, none, err
	}
	key, err := newKey(c.RSA)
	if err != nil {
		return nil, none, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  c.IPs,
		DNSNames:     c.DNS,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return nil, none, err
	}
	if len(der) == 0 {
		return nil, none, errors.New("empty certificate")
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	if _, err := x509.ParseCertificate(der); err != nil {
		return nil, none, fmt.Errorf("server certificate: %v", err)
	}
	return caPEM, cert, nil
}

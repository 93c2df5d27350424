// Package clients is the official Go client's conformance suite (issue 11): the scenarios of
// the Java and Python suites, run with `go test` against the broker named by
// MAGNETAR_SERVICE_URL and MAGNETAR_ADMIN_URL (scripts/clients/go-suite.sh). Against a secured
// broker (pulsar+ssl:// and https:// URLs), MAGNETAR_TLS_TRUST_CERTS names the CA's PEM file
// (hostnames are verified) and MAGNETAR_AUTH_TOKEN holds a super-user's token: every client and
// admin call of the suite then goes over TLS with that token; unset, they are plain.
package clients

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/sirupsen/logrus"
)

func quietLogger() log.Logger {
	l := logrus.New()
	l.SetLevel(logrus.WarnLevel)
	return log.NewLoggerWithLogrus(l)
}

var (
	serviceURL = envOr("MAGNETAR_SERVICE_URL", "pulsar://127.0.0.1:6650")
	adminURL   = envOr("MAGNETAR_ADMIN_URL", "http://127.0.0.1:8080")
	trustCerts = os.Getenv("MAGNETAR_TLS_TRUST_CERTS")
	authToken  = os.Getenv("MAGNETAR_AUTH_TOKEN")
	httpClient = http.DefaultClient
	namespace  string
)

// adminHTTPClient is the admin calls' HTTP client: the default one, or one trusting only the
// CA of MAGNETAR_TLS_TRUST_CERTS (and verifying hostnames, as Go always does).
func adminHTTPClient() (*http.Client, error) {
	if trustCerts == "" {
		return http.DefaultClient, nil
	}
	pem, err := os.ReadFile(trustCerts)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no certificate in %s", trustCerts)
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return &http.Client{Transport: transport}, nil
}

// authorize adds the token of MAGNETAR_AUTH_TOKEN to an admin request, if there is one.
func authorize(req *http.Request) {
	if authToken != "" {
		req.Header.Set("Authorization", "Bearer "+authToken)
	}
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

func shortID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// admin calls the admin REST API; any status other than 2xx fails the test.
func admin(t *testing.T, method, path string, body any) []byte {
	t.Helper()
	var reader io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		reader = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, adminURL+"/admin/v2"+path, reader)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	authorize(req)
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, out)
	}
	return out
}

// TestMain creates one tenant and namespace (8 bundles) for the whole run.
func TestMain(m *testing.M) {
	var err error
	if httpClient, err = adminHTTPClient(); err != nil {
		fmt.Fprintln(os.Stderr, "MAGNETAR_TLS_TRUST_CERTS:", err)
		os.Exit(2)
	}
	var clusters []string
	if err := json.Unmarshal(adminOnce("GET", "/clusters", nil), &clusters); err != nil {
		fmt.Fprintln(os.Stderr, "clusters:", err)
		os.Exit(2)
	}
	tenant := "gt-" + shortID()
	adminOnce("PUT", "/tenants/"+tenant, map[string]any{"allowedClusters": clusters, "adminRoles": []string{}})
	namespace = tenant + "/ns"
	adminOnce("PUT", "/namespaces/"+namespace, map[string]any{"bundles": map[string]any{"numBundles": 8}})
	os.Exit(m.Run())
}

func adminOnce(method, path string, body any) []byte {
	var reader io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		reader = bytes.NewReader(raw)
	}
	req, _ := http.NewRequest(method, adminURL+"/admin/v2"+path, reader)
	req.Header.Set("Content-Type", "application/json")
	authorize(req)
	resp, err := httpClient.Do(req)
	if err != nil {
		fmt.Fprintln(os.Stderr, method, path, err)
		os.Exit(2)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		fmt.Fprintln(os.Stderr, method, path, resp.StatusCode, string(out))
		os.Exit(2)
	}
	return out
}

func topic(name string) string {
	return "persistent://" + namespace + "/" + name + "-" + shortID()
}

func restPath(topic string) string {
	return "/persistent/" + strings.TrimPrefix(topic, "persistent://")
}

// clientOptions are every client's options: the service URL, and TLS and a token if set.
func clientOptions() pulsar.ClientOptions {
	opts := pulsar.ClientOptions{
		URL:              serviceURL,
		OperationTimeout: 30 * time.Second,
		Logger:           quietLogger(),
	}
	if trustCerts != "" {
		opts.TLSTrustCertsFilePath = trustCerts
		opts.TLSValidateHostname = true
		opts.TLSAllowInsecureConnection = false
	}
	if authToken != "" {
		opts.Authentication = pulsar.NewAuthenticationToken(authToken)
	}
	return opts
}

func newClient(t *testing.T) pulsar.Client {
	t.Helper()
	c, err := pulsar.NewClient(clientOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func mustProducer(t *testing.T, c pulsar.Client, opts pulsar.ProducerOptions) pulsar.Producer {
	t.Helper()
	p, err := c.CreateProducer(opts)
	if err != nil {
		t.Fatalf("create producer on %s: %v", opts.Topic, err)
	}
	t.Cleanup(p.Close)
	return p
}

func mustConsumer(t *testing.T, c pulsar.Client, opts pulsar.ConsumerOptions) pulsar.Consumer {
	t.Helper()
	if opts.SubscriptionInitialPosition == 0 {
		opts.SubscriptionInitialPosition = pulsar.SubscriptionPositionEarliest
	}
	cons, err := c.Subscribe(opts)
	if err != nil {
		t.Fatalf("subscribe to %s%s: %v", opts.Topic, opts.TopicsPattern, err)
	}
	t.Cleanup(cons.Close)
	return cons
}

// receive waits at most d for the next message; nil when none came.
func receive(t *testing.T, c pulsar.Consumer, d time.Duration) pulsar.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	msg, err := c.Receive(ctx)
	if err != nil {
		return nil
	}
	return msg
}

func send(t *testing.T, p pulsar.Producer, msg *pulsar.ProducerMessage) pulsar.MessageID {
	t.Helper()
	id, err := p.Send(ctxFor(t, 30*time.Second), msg)
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	return id
}

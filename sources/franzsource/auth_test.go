package franzsource_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/onceq/onceq/internal/testsupport/grouptest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/sources/franzsource"
	"github.com/onceq/onceq/sources/kafkagroup"
)

// On a cluster that requires SASL, the source without credentials is
// refused at New; with SASL(PLAIN) it checks the topic and delivers.
func TestSASL(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.Ports(0), kfake.EnableSASL(), kfake.Superuser("PLAIN", "worker", "s3cret"),
		kfake.SeedTopics(1, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	addr := c.ListenAddrs()[0]
	auth := plain.Auth{User: "worker", Pass: "s3cret"}.AsMechanism()

	ctx := testenv.Context(t, 5*time.Second)
	if s, err := franzsource.New(ctx, []string{addr}, "g", []string{"orders"}, kafkagroup.WithLogger(testenv.Logger(t))); err == nil {
		_ = s.Close(context.Background())
		t.Fatal("New without credentials succeeded on a SASL cluster")
	}
	produce(t, client(t, addr, kgo.SASL(auth)), &kgo.Record{Topic: "orders", Value: []byte("o-1")})
	s := newSource(t, addr, grouptest.TopicName(t, "group"), []string{"orders"}, franzsource.SASL(auth))
	if got := grouptest.ReceiveN(t, s, 1); string(got[0].Body) != "o-1" {
		t.Fatalf("received %q", got[0].Body)
	}
}

// On a TLS cluster the source connects with TLS(cfg), trusting the
// cluster's certificate, and delivers.
func TestTLS(t *testing.T) {
	t.Parallel()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	c, err := kfake.NewCluster(kfake.Ports(0), kfake.SeedTopics(1, "orders"),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	addr := c.ListenAddrs()[0]
	cfg := &tls.Config{RootCAs: roots}

	produce(t, client(t, addr, kgo.DialTLSConfig(cfg)), &kgo.Record{Topic: "orders", Value: []byte("o-1")})
	s := newSource(t, addr, grouptest.TopicName(t, "group"), []string{"orders"}, franzsource.TLS(cfg))
	if got := grouptest.ReceiveN(t, s, 1); string(got[0].Body) != "o-1" {
		t.Fatalf("received %q", got[0].Body)
	}
}

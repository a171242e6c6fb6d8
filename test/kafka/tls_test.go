package kafka_test

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestTLSOnTheSamePort: the Kafka listener serves TLS clients (franz-go
// with a TLS dialer, kcat with security.protocol=ssl) and plaintext ones on
// one port, and the admin API answers HTTPS as well as HTTP.
func TestTLSOnTheSamePort(t *testing.T) {
	n := startNode(t)
	ctx := ctxTimeout(t, time.Minute)
	insecure := &tls.Config{InsecureSkipVerify: true}
	tcl := newClient(t, n.KafkaAddr(), kgo.DialTLSConfig(insecure), kgo.DefaultProduceTopic("over-tls"),
		kgo.ConsumeTopics("over-tls"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if _, err := kadm.NewClient(tcl).CreateTopic(ctx, 1, 1, nil, "over-tls"); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if err := tcl.ProduceSync(ctx, &kgo.Record{Value: []byte(fmt.Sprint("tls-", i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	plain := newClient(t, n.KafkaAddr(), kgo.DefaultProduceTopic("over-tls"))
	if err := plain.ProduceSync(ctx, &kgo.Record{Value: []byte("plain")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	got := 0
	for got < 11 {
		fs := tcl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		got += fs.NumRecords()
	}
	kcat := requireTool(t, "kcat")
	out := run(t, 30*time.Second, "", kcat, "-b", n.KafkaAddr(), "-X", "security.protocol=ssl", "-X", "enable.ssl.certificate.verification=false",
		"-C", "-t", "over-tls", "-o", "beginning", "-e", "-q")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 11 {
		t.Fatalf("kcat over TLS read %d records:\n%s", len(lines), out)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: insecure}, Timeout: 10 * time.Second}
	for _, scheme := range []string{"https", "http"} {
		resp, err := hc.Get(scheme + "://" + n.HTTPAddr() + "/healthz")
		if err != nil {
			t.Fatalf("%s: %v", scheme, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || (scheme == "https") != (resp.TLS != nil) {
			t.Fatalf("%s: %s tls=%v", scheme, resp.Status, resp.TLS != nil)
		}
	}
}

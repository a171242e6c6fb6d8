package remoting

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/rosettamq/rosetta/internal/broker/security"
	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/remoting/protocol"
)

// FuzzRemotingAuthenticate: arbitrary AccessKey, Signature, SecurityToken
// and body never panic the verifier and never authenticate without the
// secret; the resource checks of any request code never panic.
func FuzzRemotingAuthenticate(f *testing.F) {
	store, err := meta.OpenBolt(filepath.Join(f.TempDir(), "meta.db"))
	if err != nil {
		f.Fatal(err)
	}
	defer store.Close()
	sec, err := security.New(context.Background(), store, security.Options{Authorization: true})
	if err != nil {
		f.Fatal(err)
	}
	if err := sec.SetPassword(context.Background(), security.User("t"), "alice", "secret", 0); err != nil {
		f.Fatal(err)
	}
	c := &conn{s: &Server{opts: Options{Security: sec, Authentication: true}}, remote: "127.0.0.1:1"}
	f.Add(int32(10), "alice", "c2lnbmF0dXJl", "", []byte("body"), "orders")
	f.Add(int32(34), "eyJhbGciOiJIUzI1NiJ9.e30.x", "", "tok", []byte(`{"consumerDataSet":[{"groupName":"g"}]}`), "")
	f.Add(int32(200151), "alice", "", "", []byte(`{"acks":[{"c":"g","t":"x","so":1,"q":0,"b":"AQ=="}]}`), "t")
	f.Fuzz(func(t *testing.T, code int32, ak, sig, token string, body []byte, topic string) {
		req := &protocol.Command{Code: code, Body: body, ExtFields: protocol.Pairs("AccessKey", ak, "Signature", sig,
			"SecurityToken", token, "topic", topic, "b", topic)}
		if p, err := c.authenticate(sec, req); err == nil {
			t.Fatalf("authenticated as %v without the secret", p)
		}
		_ = requestChecks(req)
	})
}

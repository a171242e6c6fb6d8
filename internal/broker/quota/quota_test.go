package quota

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/model"
)

func newTestManager(t *testing.T) (*Manager, *time.Time) {
	t.Helper()
	store, err := meta.OpenBolt(filepath.Join(t.TempDir(), "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	m, err := New(context.Background(), store, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	m.now = func() time.Time { return now }
	return m, &now
}

var acmeProd = model.TopicName{Tenant: "acme", Namespace: "prod", Topic: "orders"}

func TestChargeThrottlesPastTheRate(t *testing.T) {
	m, now := newTestManager(t)
	if err := m.Set(context.Background(), "test", Entity{Kind: "namespace", Name: "acme/prod"}, Limits{ProduceBytesPerSecond: 1000}); err != nil {
		t.Fatal(err)
	}
	if d := m.Charge(acmeProd, "", "", Produce, 1000); d != 0 {
		t.Fatalf("one second of burst: %v", d)
	}
	if d := m.Charge(acmeProd, "", "", Produce, 500); d != 500*time.Millisecond {
		t.Fatalf("500 bytes of debt at 1000/s: %v", d)
	}
	*now = now.Add(500 * time.Millisecond)
	if d := m.Charge(acmeProd, "", "", Produce, 0); d != 0 {
		t.Fatalf("debt paid after 500 ms: %v", d)
	}
	other := model.TopicName{Tenant: "acme", Namespace: "dev", Topic: "orders"}
	if d := m.Charge(other, "", "", Produce, 1<<20); d != 0 {
		t.Fatalf("another namespace: %v", d)
	}
	if d := m.Charge(acmeProd, "", "", Fetch, 1<<20); d != 0 {
		t.Fatalf("no fetch limit: %v", d)
	}
	if d := m.Charge(acmeProd, "", "", Produce, 1<<30); d != maxThrottle {
		t.Fatalf("throttle bounded: %v", d)
	}
	// A user's quota follows the user across namespaces.
	m.Set(context.Background(), "test", Entity{Kind: "user", Name: "alice"}, Limits{FetchBytesPerSecond: 100})
	if d := m.Charge(other, "alice", "", Fetch, 300); d != 2*time.Second {
		t.Fatalf("user quota: %v", d)
	}
	if d := m.Charge(other, "bob", "", Fetch, 300); d != 0 {
		t.Fatalf("another user: %v", d)
	}
}

func TestAdmitRefusesInDebt(t *testing.T) {
	m, now := newTestManager(t)
	m.Set(context.Background(), "test", Entity{Kind: "tenant", Name: "acme"}, Limits{ProduceBytesPerSecond: 1000})
	if !m.Admit(acmeProd, "", "", Produce, 1500) { // the tenant's bucket goes into debt
		t.Fatal("first admitted")
	}
	if m.Admit(acmeProd, "", "", Produce, 1) {
		t.Fatal("in debt: refused")
	}
	*now = now.Add(600 * time.Millisecond)
	if !m.Admit(acmeProd, "", "", Produce, 1) {
		t.Fatal("debt paid: admitted")
	}
	if st := m.Stats()[Entity{Kind: "tenant", Name: "acme"}][Produce]; st.Refused != 1 || st.Bytes != 1501 {
		t.Fatalf("stats: %+v", st)
	}
}

func TestStorageAndTopicQuotas(t *testing.T) {
	m, _ := newTestManager(t)
	m.Set(context.Background(), "test", Entity{Kind: "namespace", Name: "acme/prod"}, Limits{StorageBytes: 100, Topics: 2})
	m.usage.Store(&map[Entity]Usage{{Kind: "namespace", Name: "acme/prod"}: {StorageBytes: 99, Topics: 1}})
	if err := m.CheckStorage(acmeProd); err != nil {
		t.Fatal(err)
	}
	if err := m.CheckTopicCreate(acmeProd); err != nil {
		t.Fatal(err)
	}
	m.TopicCreated(acmeProd)
	if err := m.CheckTopicCreate(acmeProd); !errors.Is(err, ErrExceeded) {
		t.Fatalf("topic quota: %v", err)
	}
	m.usage.Store(&map[Entity]Usage{{Kind: "namespace", Name: "acme/prod"}: {StorageBytes: 100}})
	if err := m.CheckStorage(acmeProd); !errors.Is(err, ErrExceeded) {
		t.Fatalf("storage quota: %v", err)
	}
}

func TestEntitiesAndPersistence(t *testing.T) {
	for _, bad := range []string{"tenant:", "tenant:a/b", "namespace:a", "namespace:a/b/c", "user:", "client:x"} {
		if _, err := ParseEntity(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	m, _ := newTestManager(t)
	e := Entity{Kind: "namespace", Name: "a/b"}
	if err := m.Set(context.Background(), "test", e, Limits{Topics: 3}); err != nil {
		t.Fatal(err)
	}
	m2, err := New(context.Background(), m.meta, nil)
	if err != nil || m2.List()[e].Topics != 3 {
		t.Fatalf("reloaded: %v %v", m2.List(), err)
	}
	if err := m.Set(context.Background(), "test", e, Limits{}); err != nil || len(m.List()) != 0 {
		t.Fatalf("removed: %v %v", m.List(), err)
	}
}

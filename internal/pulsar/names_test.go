package pulsar

import (
	"errors"
	"testing"

	"github.com/rosettamq/rosetta/internal/model"
)

// Pulsar names map onto Rosetta's tenant/namespace/topic, with partitions
// as queues; non-persistent and malformed names are refused.
func TestParseTopic(t *testing.T) {
	for in, want := range map[string]string{
		"orders":                         "persistent://public/default/orders",
		"persistent://acme/sales/orders": "persistent://acme/sales/orders",
		"persistent://acme/sales/orders-partition-3": "persistent://acme/sales/orders-partition-3",
		"acme/sales/orders-partition-0":              "persistent://acme/sales/orders-partition-0",
		"persistent://acme/sales/a-partition-x":      "persistent://acme/sales/a-partition-x",
		"persistent://acme/sales/a-partition-01":     "persistent://acme/sales/a-partition-01",
	} {
		ref, err := ParseTopic(in)
		if err != nil || ref.String() != want {
			t.Errorf("%s: %s (%v), want %s", in, ref, err, want)
		}
	}
	ref, _ := ParseTopic("persistent://acme/sales/orders-partition-3")
	if ref.Partition != 3 || ref.Name.Topic != "orders" {
		t.Fatalf("partition ref %+v", ref)
	}
	if _, err := ParseTopic("non-persistent://public/default/x"); !errors.Is(err, ErrNonPersistent) || !errors.Is(err, model.ErrInvalidTopic) {
		t.Fatalf("non-persistent: %v", err)
	}
	for _, bad := range []string{"persistent://a/b", "persistent://a/b/c/d", "http://a/b/c", "a/b", "persistent://a/b/"} {
		if _, err := ParseTopic(bad); !errors.Is(err, model.ErrInvalidTopic) {
			t.Errorf("%s: %v", bad, err)
		}
	}
}

// FuzzParseTopic: no name crashes the parser, and a parsed name's full
// form parses to the same topic and partition.
func FuzzParseTopic(f *testing.F) {
	for _, s := range []string{"orders", "persistent://a/b/c-partition-2", "non-persistent://a/b/c", "x://", "-partition-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ref, err := ParseTopic(s)
		if err != nil {
			return
		}
		again, err := ParseTopic(ref.String())
		if err != nil || again != ref {
			t.Fatalf("%q → %s → %+v (%v)", s, ref, again, err)
		}
	})
}

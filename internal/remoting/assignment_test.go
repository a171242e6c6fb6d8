package remoting

import (
	"fmt"
	"testing"
)

func TestAssignQueues(t *testing.T) {
	queues := []int32{0, 1, 2, 3, 4, 5, 6, 7}
	members := []string{"a", "b", "c"}
	for _, c := range []struct {
		me     string
		circle bool
		share  int
		want   string
	}{
		{"a", false, 0, "[0 1 2]"}, {"b", false, 0, "[3 4 5]"}, {"c", false, 0, "[6 7]"},
		{"a", true, 0, "[0 3 6]"}, {"c", true, 0, "[2 5]"},
		{"c", false, 1, "[6 7 0 1 2]"},
		{"x", false, 0, "[]"},
	} {
		if got := fmt.Sprint(assignQueues(queues, members, c.me, c.circle, c.share)); got != c.want {
			t.Errorf("%+v: %s", c, got)
		}
	}
	many := []string{"a", "b", "c"}
	if got := fmt.Sprint(assignQueues([]int32{0, 1}, many, "c", false, 0)); got != "[]" {
		t.Errorf("more members than queues, pull: %s", got)
	}
	if got := fmt.Sprint(assignQueues([]int32{0, 1}, many, "c", false, 1)); got != "[0]" {
		t.Errorf("more members than queues, pop: %s", got)
	}
}

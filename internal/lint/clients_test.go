package lint

import (
	"os/exec"
	"strings"
	"testing"
)

// clientPackages are client libraries: the load generators and tests use
// them; the server binary must not link them (they bring their own
// loggers, telemetry and goroutines, and tens of megabytes). Codec and
// protocol-definition packages (franz-go's kmsg and kerr, the RocketMQ 5
// protocol package) are not clients.
var clientPackages = []string{
	"github.com/twmb/franz-go/pkg/kgo",
	"github.com/twmb/franz-go/pkg/kadm",
	"github.com/twmb/franz-go/pkg/sasl",
	"github.com/IBM/sarama",
	"github.com/apache/rocketmq-client-go",
	"github.com/chromedp",
}

// TestServerLinksNoClient fails when the rosetta command's import graph
// holds a client library (the RocketMQ 5 client itself, as opposed to its
// protocol package, included).
func TestServerLinksNoClient(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "../../cmd/rosetta").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		bad := strings.HasPrefix(pkg, "github.com/apache/rocketmq-clients/golang") &&
			!strings.HasPrefix(pkg, "github.com/apache/rocketmq-clients/golang/v5/protocol/")
		for _, c := range clientPackages {
			bad = bad || pkg == c || strings.HasPrefix(pkg, c+"/")
		}
		if bad {
			t.Errorf("cmd/rosetta links the client package %s (load generators belong in cmd/rosetta-bench)", pkg)
		}
	}
}

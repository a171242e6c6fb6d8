package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/rosettamq/rosetta/internal/broker/security"
	"github.com/rosettamq/rosetta/internal/kafka"
	"github.com/rosettamq/rosetta/internal/meta"
)

// newSecurity builds the users, credentials and ACL service from the
// security section.
func newSecurity(ctx context.Context, cfg Config, store meta.Store, log *slog.Logger) (*security.Service, error) {
	keyFile := cfg.Security.KeyFile
	if keyFile == "" {
		keyFile = filepath.Join(cfg.DataDir, "security.key")
	}
	var supers []string
	for _, p := range strings.Split(cfg.Security.SuperUsers, ";") {
		if p = strings.TrimSpace(p); p != "" {
			supers = append(supers, p)
		}
	}
	svc, err := security.New(ctx, store, security.Options{
		Authorization: cfg.Security.Authorization,
		SuperUsers:    supers,
		AllowIfNoACL:  cfg.Security.AllowIfNoACL,
		KeyFile:       keyFile,
		JWT: security.JWTOptions{
			HMACSecret: []byte(cfg.Security.JWTHMACSecret), RSAPublicKey: cfg.Security.JWTPublicKeyFile,
			Issuer: cfg.Security.JWTIssuer, Audience: cfg.Security.JWTAudience, PrincipalClaim: cfg.Security.JWTPrincipalClaim,
		},
		Logger: log,
	})
	if err != nil {
		return nil, fmt.Errorf("security: %w", err)
	}
	return svc, nil
}

// Security returns the users, credentials and ACL service.
func (a *App) Security() *security.Service { return a.security }

// kafkaListenerSpec is one Kafka listener to open.
type kafkaListenerSpec struct {
	name, addr, tls string
	listener        kafka.Listener
}

// kafkaListeners lists the Kafka listeners to open: the named ones of
// listen.kafka_listeners (TLS enforced on SSL and SASL_SSL, off on the
// others), or the one listen.kafka PLAINTEXT listener with listen.kafka_tls.
// The first is registered as "kafka", each named one also as "kafka/NAME".
func (a *App) kafkaListeners() ([]kafkaListenerSpec, error) {
	if a.cfg.Listen.KafkaListeners == "" {
		if a.cfg.Listen.Kafka == "" {
			return nil, nil
		}
		return []kafkaListenerSpec{{"kafka", a.cfg.Listen.Kafka, a.cfg.Listen.KafkaTLS,
			kafka.Listener{Name: kafka.ProtocolPlaintext, Protocol: kafka.ProtocolPlaintext}}}, nil
	}
	ls, addrs, err := kafka.ParseListeners(a.cfg.Listen.KafkaListeners, a.cfg.Listen.KafkaProtocolMap, a.cfg.Listen.KafkaAdvertisedListeners)
	if err != nil {
		return nil, err
	}
	specs := make([]kafkaListenerSpec, len(ls))
	for i, l := range ls {
		mode := "disabled"
		if l.TLS() {
			mode = "enforcing"
		}
		specs[i] = kafkaListenerSpec{"kafka/" + l.Name, addrs[i], mode, l}
		if l.SASL() && len(splitComma(a.cfg.Security.SASLMechanisms)) == 0 {
			return nil, fmt.Errorf("kafka listener %s uses SASL but security.sasl_mechanisms is empty", l.Name)
		}
	}
	return specs, nil
}

func splitComma(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, strings.ToUpper(p))
		}
	}
	return out
}

// SetUserOffline writes a user (password and/or namespace) into a stopped
// node's data directory: how the first super user is made before a node
// starts with authorization on.
func SetUserOffline(ctx context.Context, dataDir, name, password, namespace string, iterations int) error {
	if password == "" && namespace == "" {
		return errors.New("give a password or a namespace")
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return err
	}
	store, err := meta.OpenBolt(filepath.Join(dataDir, "meta.db"))
	if err != nil {
		return fmt.Errorf("open %s (is the node running?): %w", dataDir, err)
	}
	defer store.Close()
	sec, err := security.New(ctx, store, security.Options{KeyFile: filepath.Join(dataDir, "security.key")})
	if err != nil {
		return err
	}
	actor := security.User("cli")
	if password != "" {
		if err := sec.SetPassword(ctx, actor, name, password, iterations); err != nil {
			return err
		}
	}
	if namespace != "" {
		return sec.SetUserNamespace(ctx, actor, name, namespace)
	}
	return nil
}

package security

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/rosettamq/rosetta/internal/meta"
)

// SCRAM mechanisms.
const (
	MechSCRAMSHA256 = "SCRAM-SHA-256"
	MechSCRAMSHA512 = "SCRAM-SHA-512"
)

// SCRAM iteration bounds (Kafka's: at least 4096, at most 16384).
const (
	MinSCRAMIterations     = 4096
	MaxSCRAMIterations     = 16384
	DefaultSCRAMIterations = 4096
)

const usersPrefix = "users/"

// SCRAMMechanisms lists the SCRAM mechanisms a user may hold.
var SCRAMMechanisms = []string{MechSCRAMSHA256, MechSCRAMSHA512}

// scramCredential is what is stored of a SCRAM secret: never the password,
// only the salt, the iteration count and the two derived keys.
type scramCredential struct {
	Salt       []byte `json:"salt"`
	Iterations int    `json:"iterations"`
	StoredKey  []byte `json:"storedKey"`
	ServerKey  []byte `json:"serverKey"`
}

// userRecord is one stored user.
type userRecord struct {
	Name  string                     `json:"name"`
	SCRAM map[string]scramCredential `json:"scram,omitempty"`
	// Secret is the signing secret (RocketMQ secret key), encrypted with
	// the node's key; empty when the user has none.
	Secret []byte `json:"secret,omitempty"`
	// Namespace binds the user to a default "tenant/namespace".
	Namespace string `json:"namespace,omitempty"`
	// Super users may do everything (besides security.super_users);
	// disabled users cannot authenticate (RocketMQ's user type and status).
	Super    bool `json:"super,omitempty"`
	Disabled bool `json:"disabled,omitempty"`
}

// UserInfo describes a user without any secret.
type UserInfo struct {
	Name       string           `json:"name"`
	Mechanisms []MechanismState `json:"mechanisms"`
	HasSecret  bool             `json:"hasSecret"`
	Namespace  string           `json:"namespace,omitempty"`
	Super      bool             `json:"super,omitempty"`
	Disabled   bool             `json:"disabled,omitempty"`
}

// MechanismState is one SCRAM credential's public part.
type MechanismState struct {
	Mechanism  string `json:"mechanism"`
	Iterations int    `json:"iterations"`
}

func userKey(name string) string { return usersPrefix + url.PathEscape(name) }

func (r *userRecord) info() UserInfo {
	in := UserInfo{Name: r.Name, HasSecret: len(r.Secret) > 0, Namespace: r.Namespace, Super: r.Super, Disabled: r.Disabled,
		Mechanisms: []MechanismState{}}
	for _, m := range SCRAMMechanisms {
		if c, ok := r.SCRAM[m]; ok {
			in.Mechanisms = append(in.Mechanisms, MechanismState{m, c.Iterations})
		}
	}
	return in
}

// deriveSCRAM computes the stored keys from a salted password
// (Hi(password, salt, i)), as AlterUserScramCredentials sends it.
func deriveSCRAM(mech string, salt, saltedPassword []byte, iterations int) (scramCredential, error) {
	h, ok := scramHash(mech)
	if !ok {
		return scramCredential{}, fmt.Errorf("%w: mechanism %q", ErrUnsupportedMechanism, mech)
	}
	if iterations < MinSCRAMIterations || iterations > MaxSCRAMIterations {
		return scramCredential{}, fmt.Errorf("%w: %d iterations (allowed %d to %d)", ErrInvalid, iterations, MinSCRAMIterations, MaxSCRAMIterations)
	}
	// The salted password is an HMAC key: any non-empty length works (as in
	// Kafka, which refuses only an empty salt or salted password).
	switch {
	case len(salt) == 0:
		return scramCredential{}, fmt.Errorf("%w: salt must not be empty", ErrInvalid)
	case len(saltedPassword) == 0:
		return scramCredential{}, fmt.Errorf("%w: salted password must not be empty", ErrInvalid)
	}
	stored, server := keysFromSalted(h, saltedPassword)
	return scramCredential{Salt: salt, Iterations: iterations, StoredKey: stored, ServerKey: server}, nil
}

// newSCRAMFromPassword salts and derives a credential from a password.
func newSCRAMFromPassword(mech, password string, iterations int) (scramCredential, error) {
	h, ok := scramHash(mech)
	if !ok {
		return scramCredential{}, fmt.Errorf("%w: mechanism %q", ErrUnsupportedMechanism, mech)
	}
	salt := make([]byte, 24)
	_, _ = rand.Read(salt)
	salted, err := saltPassword(h, password, salt, iterations)
	if err != nil {
		return scramCredential{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return deriveSCRAM(mech, salt, salted, iterations)
}

// verifyPassword checks a password against a stored SCRAM credential in
// constant time.
func verifyPassword(mech string, c scramCredential, password string) bool {
	h, ok := scramHash(mech)
	if !ok {
		return false
	}
	salted, err := saltPassword(h, password, c.Salt, c.Iterations)
	if err != nil {
		return false
	}
	stored, _ := keysFromSalted(h, salted)
	return hmac.Equal(stored, c.StoredKey)
}

// decoyCredential is what an unknown user's SCRAM exchange runs against: a
// salt derived from the name with the node's key, so an attacker cannot
// tell an unknown user from a wrong password.
func (s *Service) decoyCredential(mech, name string) scramCredential {
	m := hmac.New(sha512.New, s.keys.decoy[:])
	m.Write([]byte(mech + "\x00" + name))
	sum := m.Sum(nil)
	h, _ := scramHash(mech)
	return scramCredential{Salt: sum[:24], Iterations: DefaultSCRAMIterations,
		StoredKey: make([]byte, h().Size()), ServerKey: make([]byte, h().Size())}
}

// users is the in-memory copy of the stored users.
type users map[string]*userRecord

func (s *Service) loadUsers(ctx context.Context) error {
	kvs, err := s.meta.List(ctx, usersPrefix)
	if err != nil {
		return fmt.Errorf("load users: %w", err)
	}
	u := users{}
	for _, kv := range kvs {
		var r userRecord
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			s.log.Warn("skipping unreadable user record", "key", kv.Key, "err", err)
			continue
		}
		u[r.Name] = &r
	}
	s.mu.Lock()
	s.users = u
	s.mu.Unlock()
	return nil
}

// updateUser applies fn to a copy of a user's record (a new one when absent)
// and stores it; fn returning nil deletes the user.
func (s *Service) updateUser(ctx context.Context, name string, fn func(r *userRecord) (*userRecord, error)) error {
	if name == "" || strings.ContainsAny(name, "\x00") {
		return fmt.Errorf("%w: user name %q", ErrInvalid, name)
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.RLock()
	old := s.users[name]
	s.mu.RUnlock()
	cur := &userRecord{Name: name, SCRAM: map[string]scramCredential{}}
	if old != nil {
		c := *old
		c.SCRAM = map[string]scramCredential{}
		for k, v := range old.SCRAM {
			c.SCRAM[k] = v
		}
		cur = &c
	}
	next, err := fn(cur)
	if err != nil {
		return err
	}
	if next == nil {
		if old == nil {
			return fmt.Errorf("%w: %q", ErrNoUser, name)
		}
		if err := meta.Delete(ctx, s.meta, userKey(name)); err != nil {
			return fmt.Errorf("delete user: %w", err)
		}
	} else {
		b, _ := json.Marshal(next)
		if err := meta.Put(ctx, s.meta, userKey(name), b); err != nil {
			return fmt.Errorf("store user: %w", err)
		}
	}
	s.mu.Lock()
	nu := make(users, len(s.users)+1)
	for k, v := range s.users {
		nu[k] = v
	}
	if next == nil {
		delete(nu, name)
	} else {
		nu[name] = next
	}
	s.users = nu
	s.mu.Unlock()
	return nil
}

// SetPassword creates or updates a user with a password: SCRAM-SHA-256 and
// SCRAM-SHA-512 credentials (which PLAIN is checked against) and the
// encrypted signing secret RocketMQ clients sign with (access key = the
// user name, secret key = the password).
func (s *Service) SetPassword(ctx context.Context, actor Principal, name, password string, iterations int) error {
	if password == "" {
		return fmt.Errorf("%w: empty password", ErrInvalid)
	}
	if iterations == 0 {
		iterations = DefaultSCRAMIterations
	}
	if iterations < MinSCRAMIterations || iterations > MaxSCRAMIterations {
		return fmt.Errorf("%w: %d iterations (allowed %d to %d)", ErrInvalid, iterations, MinSCRAMIterations, MaxSCRAMIterations)
	}
	creds := map[string]scramCredential{}
	for _, m := range SCRAMMechanisms {
		c, err := newSCRAMFromPassword(m, password, iterations)
		if err != nil {
			return err
		}
		creds[m] = c
	}
	secret, err := s.keys.seal([]byte(password))
	if err != nil {
		return err
	}
	err = s.updateUser(ctx, name, func(r *userRecord) (*userRecord, error) {
		r.SCRAM, r.Secret = creds, secret
		return r, nil
	})
	s.audit(actor, "set password", err, "user", name, "iterations", iterations)
	return err
}

// UpsertSCRAM stores one SCRAM credential from a salt and salted password
// (Kafka AlterUserScramCredentials). The user's signing secret, if any, is
// dropped: it would no longer match the password.
func (s *Service) UpsertSCRAM(ctx context.Context, actor Principal, name, mech string, iterations int, salt, saltedPassword []byte) error {
	c, err := deriveSCRAM(mech, salt, saltedPassword, iterations)
	if err == nil {
		err = s.updateUser(ctx, name, func(r *userRecord) (*userRecord, error) {
			r.SCRAM[mech] = c
			r.Secret = nil
			return r, nil
		})
	}
	s.audit(actor, "upsert scram credential", err, "user", name, "mechanism", mech, "iterations", iterations)
	return err
}

// DeleteSCRAM removes one SCRAM credential; a user left with no credential
// and no binding is removed.
func (s *Service) DeleteSCRAM(ctx context.Context, actor Principal, name, mech string) error {
	err := s.updateUser(ctx, name, func(r *userRecord) (*userRecord, error) {
		if _, ok := r.SCRAM[mech]; !ok {
			return nil, fmt.Errorf("%w: %q has no %s credential", ErrNoUser, name, mech)
		}
		delete(r.SCRAM, mech)
		if len(r.SCRAM) == 0 && len(r.Secret) == 0 && r.Namespace == "" {
			return nil, nil
		}
		return r, nil
	})
	s.audit(actor, "delete scram credential", err, "user", name, "mechanism", mech)
	return err
}

// DeleteUser removes a user and every credential it has.
func (s *Service) DeleteUser(ctx context.Context, actor Principal, name string) error {
	err := s.updateUser(ctx, name, func(r *userRecord) (*userRecord, error) { return nil, nil })
	s.audit(actor, "delete user", err, "user", name)
	return err
}

// SetUserNamespace binds a user to a default "tenant/namespace" ("" unbinds).
func (s *Service) SetUserNamespace(ctx context.Context, actor Principal, name, namespace string) error {
	err := s.updateUser(ctx, name, func(r *userRecord) (*userRecord, error) {
		r.Namespace = namespace
		return r, nil
	})
	s.audit(actor, "set user namespace", err, "user", name, "namespace", namespace)
	return err
}

// SetUserFlags makes a user a super user or not and enables or disables
// it; nil leaves a flag as it is.
func (s *Service) SetUserFlags(ctx context.Context, actor Principal, name string, super, disabled *bool) error {
	err := s.updateUser(ctx, name, func(r *userRecord) (*userRecord, error) {
		if super != nil {
			r.Super = *super
		}
		if disabled != nil {
			r.Disabled = *disabled
		}
		return r, nil
	})
	s.audit(actor, "set user flags", err, "user", name, "super", super, "disabled", disabled)
	if err == nil {
		s.cache.reset() // super users skip ACLs
	}
	return err
}

// Users describes the named users (every user when names is empty);
// unknown names are left out.
func (s *Service) Users(names ...string) []UserInfo {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []UserInfo
	for name, r := range s.users {
		if len(names) == 0 || slices.Contains(names, name) {
			out = append(out, r.info())
		}
	}
	slices.SortFunc(out, func(a, b UserInfo) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// userDisabled reports whether a stored user is disabled.
func (s *Service) userDisabled(name string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	r := s.users[name]
	return r != nil && r.Disabled
}

// UserNamespace returns the namespace a user is bound to, or "".
func (s *Service) UserNamespace(name string) string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if r := s.users[name]; r != nil {
		return r.Namespace
	}
	return ""
}

// userSCRAM returns a user's credential for a mechanism.
func (s *Service) userSCRAM(name, mech string) (scramCredential, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	r := s.users[name]
	if r == nil || r.Disabled {
		return scramCredential{}, false
	}
	c, ok := r.SCRAM[mech]
	return c, ok
}

// VerifyPassword checks a user's password (SASL PLAIN) against the
// strongest SCRAM credential stored for it. Unknown users cost the same.
func (s *Service) VerifyPassword(name, password string) bool {
	for _, m := range []string{MechSCRAMSHA512, MechSCRAMSHA256} {
		if c, ok := s.userSCRAM(name, m); ok {
			return verifyPassword(m, c, password)
		}
	}
	verifyPassword(MechSCRAMSHA512, s.decoyCredential(MechSCRAMSHA512, name), password)
	return false
}

// SigningSecret returns a user's decrypted signing secret (the RocketMQ
// secret key) for verifying HMAC signatures.
func (s *Service) SigningSecret(name string) ([]byte, bool) {
	s.mu.RLock()
	r := s.users[name]
	s.mu.RUnlock()
	if r == nil || len(r.Secret) == 0 || r.Disabled {
		return nil, false
	}
	b, err := s.keys.open(r.Secret)
	if err != nil {
		s.log.Error("cannot decrypt a user's signing secret (was the node key replaced?)", "user", name, "err", err)
		return nil, false
	}
	return b, true
}

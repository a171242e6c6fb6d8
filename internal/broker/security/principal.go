package security

import (
	"errors"
	"fmt"
	"strings"
)

// Errors the front-ends map to their protocol's codes.
var (
	// ErrInvalid is a malformed ACL, user or credential.
	ErrInvalid = errors.New("security: invalid")
	// ErrAuthentication is a failed authentication (wrong secret, unknown
	// user, bad signature, expired token); its text is safe to show.
	ErrAuthentication = errors.New("authentication failed")
	// ErrNoUser is an unknown user in an admin call.
	ErrNoUser = errors.New("security: no such user")
	// ErrUnsupportedMechanism is a SASL mechanism not enabled here.
	ErrUnsupportedMechanism = errors.New("security: unsupported SASL mechanism")
)

// Principal is who a connection acts as: a type (User) and a name.
type Principal struct {
	Type string
	Name string
}

// Anonymous is the principal of unauthenticated connections (Kafka's
// User:ANONYMOUS).
var Anonymous = Principal{Type: "User", Name: "ANONYMOUS"}

// User returns the User principal of a name.
func User(name string) Principal { return Principal{Type: "User", Name: name} }

func (p Principal) String() string { return p.Type + ":" + p.Name }

// IsAnonymous reports whether p is the unauthenticated principal.
func (p Principal) IsAnonymous() bool { return p == Anonymous || p == Principal{} }

// ParsePrincipal reads "Type:name" (User:alice, User:*).
func ParsePrincipal(s string) (Principal, error) {
	t, n, ok := strings.Cut(s, ":")
	if !ok || t == "" || n == "" {
		return Principal{}, fmt.Errorf("%w: principal %q (want Type:name, e.g. User:alice)", ErrInvalid, s)
	}
	return Principal{Type: t, Name: n}, nil
}

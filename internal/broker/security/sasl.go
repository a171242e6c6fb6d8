package security

import (
	"bytes"
	"fmt"
)

// SASL mechanism names.
const (
	MechPlain       = "PLAIN"
	MechOAuthBearer = "OAUTHBEARER"
)

// SASLExchange is the server side of one SASL authentication.
type SASLExchange interface {
	// Step takes the client's next message and returns the server's reply;
	// done is true once the client is authenticated. An error wraps
	// ErrAuthentication and ends the exchange.
	Step(in []byte) (out []byte, done bool, err error)
	// Principal is who the client proved to be, once done.
	Principal() Principal
}

// NewSASL starts a server exchange for a mechanism.
func (s *Service) NewSASL(mech string) (SASLExchange, error) {
	switch mech {
	case MechPlain:
		return &plainExchange{s: s}, nil
	case MechSCRAMSHA256, MechSCRAMSHA512:
		h, _ := scramHash(mech)
		return &scramExchange{s: s, mech: mech, h: h}, nil
	case MechOAuthBearer:
		if s.jwt == nil {
			break
		}
		return &oauthExchange{s: s}, nil
	}
	return nil, fmt.Errorf("%w: %s", ErrUnsupportedMechanism, mech)
}

// plainExchange is SASL PLAIN (RFC 4616): authzid NUL authcid NUL passwd,
// checked against the user's stored SCRAM credential.
type plainExchange struct {
	s    *Service
	user string
}

func (e *plainExchange) Step(in []byte) ([]byte, bool, error) {
	parts := bytes.Split(in, []byte{0})
	if len(parts) != 3 || len(parts[1]) == 0 || len(parts[1]) > 1024 || len(parts[2]) > 1024 {
		return nil, false, fmt.Errorf("%w: malformed PLAIN message", ErrAuthentication)
	}
	authz, user, pass := string(parts[0]), string(parts[1]), string(parts[2])
	if authz != "" && authz != user {
		return nil, false, fmt.Errorf("%w: authorization id must equal the user name", ErrAuthentication)
	}
	if !e.s.VerifyPassword(user, pass) {
		return nil, false, fmt.Errorf("%w: invalid username or password", ErrAuthentication)
	}
	e.user = user
	return nil, true, nil
}

func (e *plainExchange) Principal() Principal { return User(e.user) }

package security

import (
	"bytes"
	"crypto/rsa"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// JWTOptions configure token authentication: a JWT signed with HS256 (a
// shared secret) or RS256 (an RSA key pair whose public half is here)
// authenticates as the principal in its subject claim — as a Kafka
// OAUTHBEARER token and as a RocketMQ access key.
type JWTOptions struct {
	HMACSecret     []byte // HS256 key; empty: HS256 tokens are refused
	RSAPublicKey   string // PEM file of the RS256 public key; empty: RS256 refused
	Issuer         string // required "iss" when set
	Audience       string // required in "aud" when set
	PrincipalClaim string // claim naming the user; default "sub"
}

// jwtVerifier checks tokens.
type jwtVerifier struct {
	opts   JWTOptions
	rsaKey *rsa.PublicKey
	parser *jwt.Parser
}

func newJWTVerifier(o JWTOptions) (*jwtVerifier, error) {
	if len(o.HMACSecret) == 0 && o.RSAPublicKey == "" {
		return nil, nil
	}
	v := &jwtVerifier{opts: o}
	var methods []string
	if len(o.HMACSecret) > 0 {
		if len(o.HMACSecret) < 32 {
			return nil, fmt.Errorf("%w: the HS256 secret must have at least 32 bytes", ErrInvalid)
		}
		methods = append(methods, "HS256")
	}
	if o.RSAPublicKey != "" {
		b, err := os.ReadFile(o.RSAPublicKey)
		if err != nil {
			return nil, fmt.Errorf("JWT public key: %w", err)
		}
		if v.rsaKey, err = jwt.ParseRSAPublicKeyFromPEM(b); err != nil {
			return nil, fmt.Errorf("JWT public key %s: %w", o.RSAPublicKey, err)
		}
		methods = append(methods, "RS256")
	}
	opts := []jwt.ParserOption{jwt.WithValidMethods(methods), jwt.WithExpirationRequired(), jwt.WithLeeway(30 * time.Second)}
	if o.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(o.Issuer))
	}
	if o.Audience != "" {
		opts = append(opts, jwt.WithAudience(o.Audience))
	}
	if v.opts.PrincipalClaim == "" {
		v.opts.PrincipalClaim = "sub"
	}
	v.parser = jwt.NewParser(opts...)
	return v, nil
}

// verify checks a token and returns its principal and expiry.
func (v *jwtVerifier) verify(token string) (Principal, time.Time, error) {
	if len(token) > 16<<10 {
		return Principal{}, time.Time{}, fmt.Errorf("%w: token too long", ErrAuthentication)
	}
	claims := jwt.MapClaims{}
	_, err := v.parser.ParseWithClaims(token, claims, func(t *jwt.Token) (any, error) {
		switch t.Method.Alg() {
		case "HS256":
			return v.opts.HMACSecret, nil
		case "RS256":
			return v.rsaKey, nil
		}
		return nil, fmt.Errorf("algorithm %s not allowed", t.Method.Alg())
	})
	if err != nil {
		return Principal{}, time.Time{}, fmt.Errorf("%w: invalid token: %v", ErrAuthentication, err)
	}
	name, _ := claims[v.opts.PrincipalClaim].(string)
	if name == "" {
		return Principal{}, time.Time{}, fmt.Errorf("%w: token has no %q claim", ErrAuthentication, v.opts.PrincipalClaim)
	}
	exp, _ := claims.GetExpirationTime()
	return User(name), exp.Time, nil
}

// VerifyToken checks a JWT (when token authentication is configured) and
// returns its principal and expiry.
func (s *Service) VerifyToken(token string) (Principal, time.Time, error) {
	if s.jwt == nil {
		return Principal{}, time.Time{}, fmt.Errorf("%w: token authentication is not configured", ErrAuthentication)
	}
	p, exp, err := s.jwt.verify(token)
	if err == nil && s.userDisabled(p.Name) {
		return Principal{}, time.Time{}, fmt.Errorf("%w: user %s is disabled", ErrAuthentication, p.Name)
	}
	return p, exp, err
}

// LooksLikeJWT reports whether a string has a JWT's three dot-separated
// parts (how a RocketMQ access key carrying a token is told apart).
func LooksLikeJWT(s string) bool { return strings.Count(s, ".") == 2 && strings.HasPrefix(s, "eyJ") }

// oauthExchange is SASL OAUTHBEARER (RFC 7628) with a JWT bearer token:
// gs2 header, then \x01-separated key=value pairs holding auth=Bearer <t>.
type oauthExchange struct {
	s       *Service
	p       Principal
	expires time.Time
}

func (e *oauthExchange) Step(in []byte) ([]byte, bool, error) {
	if len(in) > 32<<10 {
		return nil, false, fmt.Errorf("%w: oversize OAUTHBEARER message", ErrAuthentication)
	}
	gs2, rest, ok := bytes.Cut(in, []byte{1})
	if !ok || !bytes.HasPrefix(gs2, []byte("n,")) {
		return nil, false, fmt.Errorf("%w: malformed OAUTHBEARER message", ErrAuthentication)
	}
	var token string
	for _, kv := range bytes.Split(rest, []byte{1}) {
		if k, v, ok := bytes.Cut(kv, []byte("=")); ok && string(k) == "auth" {
			scheme, t, ok := strings.Cut(string(v), " ")
			if !ok || !strings.EqualFold(scheme, "Bearer") {
				return nil, false, fmt.Errorf("%w: OAUTHBEARER auth is not a Bearer token", ErrAuthentication)
			}
			token = strings.TrimSpace(t)
		}
	}
	if token == "" {
		return nil, false, fmt.Errorf("%w: OAUTHBEARER message without a token", ErrAuthentication)
	}
	p, exp, err := e.s.VerifyToken(token)
	if err != nil {
		return nil, false, err
	}
	// An authorization id in the gs2 header must name the same user.
	if authz := strings.TrimPrefix(strings.TrimSuffix(string(gs2), ","), "n,"); authz != "" && authz != "a="+p.Name {
		return nil, false, fmt.Errorf("%w: authorization id must equal the token's principal", ErrAuthentication)
	}
	e.p, e.expires = p, exp
	return nil, true, nil
}

func (e *oauthExchange) Principal() Principal { return e.p }

// Expiry is when the token ends (re-authentication must happen by then).
func (e *oauthExchange) Expiry() time.Time { return e.expires }

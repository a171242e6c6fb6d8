package security

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"
)

// The SCRAM server (RFC 5802/7677) as Kafka runs it: passwords are used as
// their UTF-8 bytes (no SASLprep, as Kafka's clients derive them), channel
// binding is not offered, client-first extensions (tokenauth=…) are
// accepted, and the client-final nonce need only end with the server's
// nonce — Kafka's rule, which librdkafka before 2.1 relies on (it sends its
// own nonce again in front).

// scramHash returns a mechanism's hash.
func scramHash(mech string) (func() hash.Hash, bool) {
	switch mech {
	case MechSCRAMSHA256:
		return sha256.New, true
	case MechSCRAMSHA512:
		return sha512.New, true
	}
	return nil, false
}

func hmacSum(h func() hash.Hash, key []byte, msg string) []byte {
	m := hmac.New(h, key)
	m.Write([]byte(msg))
	return m.Sum(nil)
}

// keysFromSalted derives the stored and server keys from Hi(password).
func keysFromSalted(h func() hash.Hash, salted []byte) (storedKey, serverKey []byte) {
	ck := hmacSum(h, salted, "Client Key")
	d := h()
	d.Write(ck)
	return d.Sum(nil), hmacSum(h, salted, "Server Key")
}

// saltPassword computes Hi(password, salt, i).
func saltPassword(h func() hash.Hash, password string, salt []byte, iterations int) ([]byte, error) {
	return pbkdf2.Key(h, password, salt, iterations, h().Size())
}

// scramExchange is one server conversation.
type scramExchange struct {
	s         *Service
	mech      string
	h         func() hash.Hash
	step      int
	user      string
	gs2       string // the gs2 header, which c= must repeat
	first     string // client-first-message-bare
	serverMsg string // server-first-message
	nonce     string // client nonce + server nonce
	cred      scramCredential
	known     bool
}

func (e *scramExchange) fail(format string, a ...any) ([]byte, bool, error) {
	e.step = 3
	return nil, false, fmt.Errorf("%w: "+format, append([]any{ErrAuthentication}, a...)...)
}

func (e *scramExchange) Step(in []byte) ([]byte, bool, error) {
	if len(in) > 4096 {
		return e.fail("oversize %s message", e.mech)
	}
	switch e.step {
	case 0:
		return e.clientFirst(string(in))
	case 1:
		return e.clientFinal(string(in))
	}
	return e.fail("%s exchange already finished", e.mech)
}

func (e *scramExchange) clientFirst(msg string) ([]byte, bool, error) {
	flag, rest, ok1 := strings.Cut(msg, ",")
	authz, bare, ok2 := strings.Cut(rest, ",")
	if !ok1 || !ok2 || (flag != "n" && flag != "y") {
		return e.fail("malformed %s client-first message (channel binding is not supported)", e.mech)
	}
	attrs := strings.Split(bare, ",")
	if len(attrs) < 2 || !strings.HasPrefix(attrs[0], "n=") || !strings.HasPrefix(attrs[1], "r=") || len(attrs[1]) < 3 {
		return e.fail("malformed %s client-first message", e.mech)
	}
	user, err := decodeSaslName(attrs[0][2:])
	if err != nil || user == "" {
		return e.fail("malformed %s user name", e.mech)
	}
	if authz != "" {
		a, err := decodeSaslName(strings.TrimPrefix(authz, "a="))
		if err != nil || !strings.HasPrefix(authz, "a=") || a != user {
			return e.fail("authorization id must equal the user name")
		}
	}
	e.user, e.gs2, e.first = user, flag+","+authz+",", bare
	e.cred, e.known = e.s.userSCRAM(user, e.mech)
	if !e.known {
		d := e.s.decoyCredential(e.mech, user)
		e.cred = d
	}
	snonce := make([]byte, 24)
	_, _ = rand.Read(snonce)
	e.nonce = attrs[1][2:] + base64.RawURLEncoding.EncodeToString(snonce)
	e.serverMsg = "r=" + e.nonce + ",s=" + base64.StdEncoding.EncodeToString(e.cred.Salt) + ",i=" + strconv.Itoa(e.cred.Iterations)
	e.step = 1
	return []byte(e.serverMsg), false, nil
}

func (e *scramExchange) clientFinal(msg string) ([]byte, bool, error) {
	withoutProof, proofAttr, ok := cutLast(msg, ",p=")
	if !ok {
		return e.fail("malformed %s client-final message", e.mech)
	}
	attrs := strings.Split(withoutProof, ",")
	if len(attrs) < 2 || !strings.HasPrefix(attrs[0], "c=") || !strings.HasPrefix(attrs[1], "r=") {
		return e.fail("malformed %s client-final message", e.mech)
	}
	if cb, err := base64.StdEncoding.DecodeString(attrs[0][2:]); err != nil || string(cb) != e.gs2 {
		return e.fail("%s channel binding does not match", e.mech)
	}
	if !strings.HasSuffix(attrs[1][2:], e.nonce) {
		return e.fail("invalid nonce in the %s client-final message", e.mech)
	}
	proof, err := base64.StdEncoding.DecodeString(proofAttr)
	if err != nil || len(proof) != e.h().Size() {
		return e.fail("malformed %s proof", e.mech)
	}
	authMsg := e.first + "," + e.serverMsg + "," + withoutProof
	sig := hmacSum(e.h, e.cred.StoredKey, authMsg)
	clientKey := make([]byte, len(proof))
	for i := range proof {
		clientKey[i] = proof[i] ^ sig[i]
	}
	d := e.h()
	d.Write(clientKey)
	if !hmac.Equal(d.Sum(nil), e.cred.StoredKey) || !e.known {
		return e.fail("invalid credentials with SASL mechanism %s", e.mech)
	}
	e.step = 2
	return []byte("v=" + base64.StdEncoding.EncodeToString(hmacSum(e.h, e.cred.ServerKey, authMsg))), true, nil
}

func (e *scramExchange) Principal() Principal { return User(e.user) }

// cutLast splits s around the last sep.
func cutLast(s, sep string) (string, string, bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

// decodeSaslName undoes SCRAM's escaping of ',' (=2C) and '=' (=3D).
func decodeSaslName(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == ',':
			return "", errors.New("unescaped comma")
		case s[i] != '=':
			b.WriteByte(s[i])
		case strings.HasPrefix(s[i:], "=2C"):
			b.WriteByte(',')
			i += 2
		case strings.HasPrefix(s[i:], "=3D"):
			b.WriteByte('=')
			i += 2
		default:
			return "", errors.New("bad escape")
		}
	}
	return b.String(), nil
}

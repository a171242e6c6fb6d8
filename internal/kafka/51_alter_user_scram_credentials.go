package kafka

// AlterUserScramCredentials (key 51), version 0.
//
// Version notes: upsertions carry a salt and Hi(password, salt, i); the
// broker keeps only the derived keys (the salted password is not stored)
// and the credential works at once. Iterations must be 4096-16384. A user
// named twice for one mechanism is DUPLICATE_RESOURCE; deleting a missing
// credential RESOURCE_NOT_FOUND. Needs Alter on the cluster; audited.

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/security"
)

func handleAlterUserScramCredentials(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.AlterUserSCRAMCredentialsRequest)
	resp := req.ResponseKind().(*kmsg.AlterUserSCRAMCredentialsResponse)
	sec := rc.srv().opts.Security

	// One result per user, in the order users first appear.
	var order []string
	errs := map[string]error{}
	codes := map[string]int16{}
	seen := map[string]bool{}
	note := func(user string) {
		if _, ok := codes[user]; !ok {
			order = append(order, user)
			codes[user] = 0
		}
	}
	fail := func(user string, code int16, err error) {
		if codes[user] == 0 {
			codes[user], errs[user] = code, err
		}
	}
	mark := func(user string, mech int8) {
		note(user)
		k := fmt.Sprintf("%s\x00%d", user, mech)
		if seen[k] {
			fail(user, kerr.DuplicateResource.Code, errors.New("a user credential cannot be altered twice in the same request"))
		}
		seen[k] = true
	}
	for _, d := range req.Deletions {
		mark(d.Name, d.Mechanism)
	}
	for _, u := range req.Upsertions {
		mark(u.Name, u.Mechanism)
	}
	// check validates one alteration's name and mechanism; "" when the
	// user already failed or the entry is invalid.
	check := func(user string, code int8) string {
		mech := scramMechanismName(code)
		switch {
		case codes[user] != 0:
			return ""
		case user == "":
			fail(user, kerr.UnacceptableCredential.Code, errors.New("username must not be empty"))
			return ""
		case mech == "":
			fail(user, kerr.UnsupportedSaslMechanism.Code, fmt.Errorf("unknown SCRAM mechanism %d", code))
		}
		return mech
	}
	gate := rc.securityGate(security.OpAlter)
	actor := rc.conn.auth.principal
	if gate == 0 {
		for _, d := range req.Deletions {
			if mech := check(d.Name, d.Mechanism); mech != "" {
				if err := sec.DeleteSCRAM(rc.ctx(), actor, d.Name, mech); err != nil {
					fail(d.Name, scramErrorCode(err), err)
				}
			}
		}
		for _, u := range req.Upsertions {
			if mech := check(u.Name, u.Mechanism); mech != "" {
				if err := sec.UpsertSCRAM(rc.ctx(), actor, u.Name, mech, int(u.Iterations), u.Salt, u.SaltedPassword); err != nil {
					fail(u.Name, scramErrorCode(err), err)
				}
			}
		}
	}
	for _, user := range order {
		r := kmsg.NewAlterUserSCRAMCredentialsResponseResult()
		r.User = user
		r.ErrorCode = codes[user]
		if gate != 0 {
			r.ErrorCode = gate
		} else if err := errs[user]; err != nil {
			r.ErrorMessage = strp(err.Error())
		}
		resp.Results = append(resp.Results, r)
	}
	return reply{resp: resp}
}

func scramErrorCode(err error) int16 {
	switch {
	case errors.Is(err, security.ErrNoUser):
		return kerr.ResourceNotFound.Code
	case errors.Is(err, security.ErrUnsupportedMechanism):
		return kerr.UnsupportedSaslMechanism.Code
	case errors.Is(err, security.ErrInvalid):
		return kerr.UnacceptableCredential.Code
	}
	return kerr.UnknownServerError.Code
}

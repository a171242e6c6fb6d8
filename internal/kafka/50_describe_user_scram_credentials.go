package kafka

// DescribeUserScramCredentials (key 50), version 0.
//
// Version notes: null users means every user with a SCRAM credential; a
// user without one is RESOURCE_NOT_FOUND, a user named twice
// DUPLICATE_RESOURCE. Needs Describe on the cluster. Only mechanisms and
// iteration counts are ever shown.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/security"
)

// scramMechanismCodes are Kafka's ScramMechanism numbers.
var scramMechanismCodes = map[string]int8{security.MechSCRAMSHA256: 1, security.MechSCRAMSHA512: 2}

func scramMechanismName(code int8) string {
	for name, c := range scramMechanismCodes {
		if c == code {
			return name
		}
	}
	return ""
}

func handleDescribeUserScramCredentials(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.DescribeUserSCRAMCredentialsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeUserSCRAMCredentialsResponse)
	sec := rc.srv().opts.Security
	if resp.ErrorCode = rc.securityGate(security.OpDescribe); resp.ErrorCode != 0 {
		return reply{resp: resp}
	}
	result := func(u security.UserInfo) kmsg.DescribeUserSCRAMCredentialsResponseResult {
		r := kmsg.NewDescribeUserSCRAMCredentialsResponseResult()
		r.User = u.Name
		for _, m := range u.Mechanisms {
			info := kmsg.NewDescribeUserSCRAMCredentialsResponseResultCredentialInfo()
			info.Mechanism = scramMechanismCodes[m.Mechanism]
			info.Iterations = int32(m.Iterations)
			r.CredentialInfos = append(r.CredentialInfos, info)
		}
		return r
	}
	if req.Users == nil {
		for _, u := range sec.Users() {
			if len(u.Mechanisms) > 0 {
				resp.Results = append(resp.Results, result(u))
			}
		}
		return reply{resp: resp}
	}
	count := map[string]int{}
	for _, u := range req.Users {
		count[u.Name]++
	}
	for _, ru := range req.Users {
		r := kmsg.NewDescribeUserSCRAMCredentialsResponseResult()
		r.User = ru.Name
		found := sec.Users(ru.Name)
		switch {
		case count[ru.Name] > 1:
			r.ErrorCode = kerr.DuplicateResource.Code
			r.ErrorMessage = strp("Cannot describe SCRAM credentials for the same user twice in a single request: " + ru.Name)
		case len(found) == 0 || len(found[0].Mechanisms) == 0:
			r.ErrorCode = kerr.ResourceNotFound.Code
			r.ErrorMessage = strp("Attempt to describe a user credential that does not exist: " + ru.Name)
		default:
			r = result(found[0])
		}
		resp.Results = append(resp.Results, r)
	}
	return reply{resp: resp}
}

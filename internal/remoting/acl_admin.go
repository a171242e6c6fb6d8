package remoting

// RocketMQ ACL 2.0 admin codes (5.3+): AUTH_CREATE_USER 3001 … AUTH_LIST_ACL
// 3010, over the one users and ACL store every protocol shares.
//
// Users: UserInfo JSON bodies {username, password, userType Super|Normal,
// userStatus enable|disable}; passwords are stored as SCRAM keys plus the
// encrypted signing secret and never returned. ACLs: AclInfo JSON
// {subject, policies: [{policyType, entries: [{resource, actions,
// sourceIps, decision}]}]}; each entry is one binding per action and source
// IP. Resources: Topic:name, Group:name, Namespace:ns (a namespace of the
// default tenant), Cluster, "Type:prefix*" (prefixed), "Type:*" and "*"
// (every topic and group). Actions: Pub → write, Sub → read, Create,
// Update → alter, Delete, Get and List → describe, All and Any → all.
// Source IPs are addresses or CIDR ranges.

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/rosettamq/rosetta/internal/broker/security"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/remoting/protocol"
)

type rmqUserInfo struct {
	Username   string `json:"username"`
	Password   string `json:"password,omitempty"`
	UserType   string `json:"userType,omitempty"`
	UserStatus string `json:"userStatus,omitempty"`
}

type rmqACLEntry struct {
	Resource  string   `json:"resource"`
	Actions   []string `json:"actions"`
	SourceIPs []string `json:"sourceIps,omitempty"`
	Decision  string   `json:"decision"`
}

type rmqPolicy struct {
	PolicyType string        `json:"policyType,omitempty"`
	Entries    []rmqACLEntry `json:"entries"`
}

type rmqACLInfo struct {
	Subject  string      `json:"subject"`
	Policies []rmqPolicy `json:"policies"`
}

// securityAdmin is what the admin codes start with: the security service
// (or the refusal when there is none) and the principal acting, as
// authenticated (a token's subject, not the token).
func securityAdmin(rc *reqCtx, req *protocol.Command) (*security.Service, security.Principal, *protocol.Command) {
	sec := rc.conn.s.opts.Security
	if sec == nil {
		return nil, rc.principal, protocol.NewResponse(req, protocol.RequestCodeNotSupported, "security is not configured")
	}
	return sec, rc.principal, nil
}

func handleAuthUser(rc *reqCtx, req *protocol.Command) *protocol.Command {
	sec, actor, refused := securityAdmin(rc, req)
	if refused != nil {
		return refused
	}
	ctx := rc.ctx
	name := req.Ext("username")
	switch req.Code {
	case protocol.AuthCreateUser, protocol.AuthUpdateUser:
		var u rmqUserInfo
		if err := json.Unmarshal(req.Body, &u); err != nil {
			return protocol.NewResponse(req, protocol.InvalidParameter, "user info body: "+err.Error())
		}
		if u.Username == "" {
			u.Username = name
		}
		exists := len(sec.Users(u.Username)) > 0
		if req.Code == protocol.AuthCreateUser && exists {
			return protocol.NewResponse(req, protocol.InvalidParameter, "user "+u.Username+" already exists")
		}
		if req.Code == protocol.AuthUpdateUser && !exists {
			return protocol.NewResponse(req, protocol.InvalidParameter, "user "+u.Username+" does not exist")
		}
		var err error
		if u.Password != "" {
			err = sec.SetPassword(ctx, actor, u.Username, u.Password, 0)
		} else if !exists {
			err = fmt.Errorf("%w: a new user needs a password", security.ErrInvalid)
		}
		if err == nil && (u.UserType != "" || u.UserStatus != "") {
			var super, disabled *bool
			if u.UserType != "" {
				v := strings.EqualFold(u.UserType, "Super")
				super = &v
			}
			if u.UserStatus != "" {
				v := strings.EqualFold(u.UserStatus, "disable")
				disabled = &v
			}
			err = sec.SetUserFlags(ctx, actor, u.Username, super, disabled)
		}
		return adminReply(req, err, nil)
	case protocol.AuthDeleteUser:
		return adminReply(req, sec.DeleteUser(ctx, actor, name), nil)
	case protocol.AuthGetUser:
		users := sec.Users(name)
		if len(users) == 0 {
			return adminReply(req, fmt.Errorf("%w: %q", security.ErrNoUser, name), nil)
		}
		return adminReply(req, nil, toRMQUser(users[0]))
	default: // AuthListUser
		out := []rmqUserInfo{}
		for _, u := range sec.Users() {
			if f := req.Ext("filter"); f == "" || strings.Contains(u.Name, f) {
				out = append(out, toRMQUser(u))
			}
		}
		return adminReply(req, nil, out)
	}
}

func toRMQUser(u security.UserInfo) rmqUserInfo {
	r := rmqUserInfo{Username: u.Name, UserType: "Normal", UserStatus: "enable"}
	if u.Super {
		r.UserType = "Super"
	}
	if u.Disabled {
		r.UserStatus = "disable"
	}
	return r
}

func handleAuthACL(rc *reqCtx, req *protocol.Command) *protocol.Command {
	sec, actor, refused := securityAdmin(rc, req)
	if refused != nil {
		return refused
	}
	ctx := rc.ctx
	subject := req.Ext("subject")
	switch req.Code {
	case protocol.AuthCreateACL, protocol.AuthUpdateACL:
		var info rmqACLInfo
		if err := json.Unmarshal(req.Body, &info); err != nil {
			return protocol.NewResponse(req, protocol.InvalidParameter, "acl info body: "+err.Error())
		}
		if info.Subject == "" {
			info.Subject = subject
		}
		var bs []security.Binding
		for _, p := range info.Policies {
			for _, e := range p.Entries {
				eb, err := entryBindings(info.Subject, e)
				if err != nil {
					return adminReply(req, err, nil)
				}
				bs = append(bs, eb...)
			}
		}
		if req.Code == protocol.AuthUpdateACL { // an update replaces the subject's entries on those resources
			var fs []security.Filter
			for _, b := range bs {
				fs = append(fs, security.Filter{Principal: b.Principal, ResourceType: b.ResourceType, ResourceName: b.ResourceName,
					PatternType: b.PatternType})
			}
			if _, err := sec.DeleteACLs(ctx, actor, fs); err != nil {
				return adminReply(req, err, nil)
			}
		}
		return adminReply(req, errors.Join(sec.CreateACLs(ctx, actor, bs)...), nil)
	case protocol.AuthDeleteACL:
		f := security.Filter{Principal: subject}
		res := req.Ext("resource")
		if res == "" {
			res = strings.Trim(req.Ext("resources"), "[]")
		}
		var fs []security.Filter
		for _, r := range strings.Split(res, ",") {
			if r = strings.TrimSpace(r); r == "" {
				continue
			}
			rt, name, pt, err := parseRMQResource(r)
			if err != nil {
				return adminReply(req, err, nil)
			}
			fs = append(fs, security.Filter{Principal: subject, ResourceType: rt[0], ResourceName: name, PatternType: pt})
		}
		if len(fs) == 0 {
			fs = []security.Filter{f}
		}
		_, err := sec.DeleteACLs(ctx, actor, fs)
		return adminReply(req, err, nil)
	case protocol.AuthGetACL:
		infos := aclInfos(sec.DescribeACLs(security.Filter{Principal: subject}), "")
		if len(infos) == 0 {
			return protocol.NewResponse(req, protocol.InvalidParameter, "no ACL for "+subject)
		}
		return adminReply(req, nil, infos[0])
	default: // AuthListACL
		var out []rmqACLInfo
		for _, i := range aclInfos(sec.DescribeACLs(security.Filter{}), req.Ext("resourceFilter")) {
			if f := req.Ext("subjectFilter"); f == "" || strings.Contains(i.Subject, f) {
				out = append(out, i)
			}
		}
		if out == nil {
			out = []rmqACLInfo{}
		}
		return adminReply(req, nil, out)
	}
}

// rmqActions maps RocketMQ actions to operations.
var rmqActions = map[string]security.Operation{"pub": security.OpWrite, "sub": security.OpRead, "create": security.OpCreate,
	"update": security.OpAlter, "delete": security.OpDelete, "get": security.OpDescribe, "list": security.OpDescribe,
	"all": security.OpAll, "any": security.OpAll}

// entryBindings expands one policy entry into bindings.
func entryBindings(subject string, e rmqACLEntry) ([]security.Binding, error) {
	rts, name, pt, err := parseRMQResource(e.Resource)
	if err != nil {
		return nil, err
	}
	perm, err := security.ParsePermission(e.Decision)
	if err != nil {
		return nil, err
	}
	hosts := e.SourceIPs
	if len(hosts) == 0 {
		hosts = []string{security.Wildcard}
	}
	var out []security.Binding
	for _, a := range e.Actions {
		op, ok := rmqActions[strings.ToLower(a)]
		if !ok {
			return nil, fmt.Errorf("%w: action %q", security.ErrInvalid, a)
		}
		for _, h := range hosts {
			if strings.Contains(h, "-") {
				return nil, fmt.Errorf("%w: source IP range %q: use CIDR notation (10.0.0.0/8)", security.ErrInvalid, h)
			}
			for _, rt := range rts {
				out = append(out, security.Binding{ResourceType: rt, ResourceName: name, PatternType: pt, Principal: subject,
					Host: h, Operation: op, Permission: perm})
			}
		}
	}
	return out, nil
}

// parseRMQResource reads a RocketMQ resource: Type:name, Type:prefix*,
// Type:*, Cluster or *.
func parseRMQResource(r string) ([]security.ResourceType, string, security.PatternType, error) {
	if r == "*" {
		return []security.ResourceType{security.ResourceTopic, security.ResourceGroup}, security.Wildcard, security.PatternLiteral, nil
	}
	typ, name, _ := strings.Cut(r, ":")
	pt := security.PatternLiteral
	if name != "*" && strings.HasSuffix(name, "*") {
		pt, name = security.PatternPrefixed, strings.TrimSuffix(name, "*")
	}
	switch strings.ToLower(typ) {
	case "cluster":
		return []security.ResourceType{security.ResourceCluster}, security.ClusterResourceName, security.PatternLiteral, nil
	case "topic":
		if name != security.Wildcard && pt == security.PatternLiteral {
			name = aclTopic(name)
		}
		return []security.ResourceType{security.ResourceTopic}, name, pt, nil
	case "group":
		return []security.ResourceType{security.ResourceGroup}, name, pt, nil
	case "namespace":
		return []security.ResourceType{security.ResourceNamespace}, model.DefaultTenant + "/" + name, pt, nil
	}
	return nil, "", 0, fmt.Errorf("%w: resource %q (want Topic:, Group:, Namespace:, Cluster or *)", security.ErrInvalid, r)
}

// aclInfos groups bindings into RocketMQ ACL infos by subject, keeping
// those whose resource contains resourceFilter.
func aclInfos(bs []security.Binding, resourceFilter string) []rmqACLInfo {
	type key struct{ res, perm, host string }
	bySubject := map[string]map[key][]string{}
	var subjects []string
	for _, b := range bs {
		res := rmqResource(b)
		if res == "" || (resourceFilter != "" && !strings.Contains(res, resourceFilter)) {
			continue
		}
		m := bySubject[b.Principal]
		if m == nil {
			m = map[key][]string{}
			bySubject[b.Principal] = m
			subjects = append(subjects, b.Principal)
		}
		k := key{res, b.Permission.String(), b.Host}
		m[k] = append(m[k], rmqAction(b.Operation))
	}
	slices.Sort(subjects)
	var out []rmqACLInfo
	for _, s := range subjects {
		pol := rmqPolicy{PolicyType: "Custom"}
		for k, actions := range bySubject[s] {
			e := rmqACLEntry{Resource: k.res, Actions: actions, Decision: strings.ToUpper(k.perm[:1]) + k.perm[1:]}
			if k.host != security.Wildcard {
				e.SourceIPs = []string{k.host}
			}
			pol.Entries = append(pol.Entries, e)
		}
		slices.SortFunc(pol.Entries, func(a, b rmqACLEntry) int { return strings.Compare(a.Resource+a.Decision, b.Resource+b.Decision) })
		out = append(out, rmqACLInfo{Subject: s, Policies: []rmqPolicy{pol}})
	}
	return out
}

func rmqResource(b security.Binding) string {
	name := b.ResourceName
	if b.PatternType == security.PatternPrefixed {
		name += "*"
	}
	switch b.ResourceType {
	case security.ResourceCluster:
		return "Cluster"
	case security.ResourceTopic:
		return "Topic:" + name
	case security.ResourceGroup:
		return "Group:" + name
	case security.ResourceNamespace:
		if ns, ok := strings.CutPrefix(name, model.DefaultTenant+"/"); ok {
			return "Namespace:" + ns
		}
	}
	return "" // not expressible in RocketMQ's model
}

func rmqAction(op security.Operation) string {
	switch op {
	case security.OpWrite:
		return "Pub"
	case security.OpRead:
		return "Sub"
	case security.OpCreate:
		return "Create"
	case security.OpAlter:
		return "Update"
	case security.OpDelete:
		return "Delete"
	case security.OpDescribe:
		return "Get"
	case security.OpAll:
		return "All"
	}
	return op.String()
}

// adminReply answers an admin code: the error's code and text, or the
// value as the JSON body.
func adminReply(req *protocol.Command, err error, v any) *protocol.Command {
	if err != nil {
		code := int32(protocol.SystemError)
		if errors.Is(err, security.ErrInvalid) || errors.Is(err, security.ErrNoUser) {
			code = protocol.InvalidParameter
		}
		return protocol.NewResponse(req, code, err.Error())
	}
	resp := protocol.NewResponse(req, protocol.Success, "")
	if v != nil {
		resp.Body, _ = json.Marshal(v)
	}
	return resp
}

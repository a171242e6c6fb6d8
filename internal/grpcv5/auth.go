package grpcv5

// Authentication and authorization of gRPC calls, as RocketMQ 5's proxy
// does it: each call carries "authorization: MQv2-HMAC-SHA1
// Credential=<AccessKey>/<region>/Rocketmq, SignedHeaders=x-mq-date-time,
// Signature=<hex HmacSHA1(secret, x-mq-date-time)>"; the access key is a
// user (secret = its password) or a JWT (its subject). Each request's
// topics and groups are then checked against the shared ACL store:
// UNAUTHENTICATED for missing or wrong credentials, PERMISSION_DENIED for
// a principal without the ACL — before anything is written or taken.

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/hex"
	"net"
	"strings"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/rosettamq/rosetta/internal/broker/security"
)

// callAuth is who a call acts as and from where.
type callAuth struct {
	p    security.Principal
	host string
}

// authOn reports whether calls are authenticated or authorized at all.
func (s *Server) authOn() bool {
	sec := s.opts.Security
	return sec != nil && (s.opts.Authentication || sec.AuthorizationEnabled())
}

// authenticate reads a call's credentials from its metadata.
func (s *Server) authenticate(ctx context.Context) (callAuth, error) {
	a := callAuth{p: security.Anonymous}
	if pr, ok := peer.FromContext(ctx); ok {
		if ta, ok := pr.Addr.(*net.TCPAddr); ok {
			a.host = ta.IP.String()
		}
	}
	md, _ := metadata.FromIncomingContext(ctx)
	header := first(md, "authorization")
	if strings.Contains(header, "Credential=/") { // a client with empty credentials signs anyway
		header = ""
	}
	if header == "" {
		if s.opts.Authentication {
			return a, s.authFailed(a, "no authorization header: the client must be given credentials")
		}
		return a, nil
	}
	ak, sig, ok := parseAuthorization(header)
	if !ok {
		return a, s.authFailed(a, "malformed authorization header")
	}
	sec := s.opts.Security
	if security.LooksLikeJWT(ak) {
		p, _, err := sec.VerifyToken(ak)
		if err != nil {
			return a, s.authFailed(a, err.Error())
		}
		a.p = p
		return a, nil
	}
	secret, known := sec.SigningSecret(ak)
	got, err := hex.DecodeString(sig)
	m := hmac.New(sha1.New, secret)
	m.Write([]byte(first(md, "x-mq-date-time")))
	if !known || err != nil || !hmac.Equal(m.Sum(nil), got) {
		return a, s.authFailed(a, "unknown access key or signature mismatch")
	}
	a.p = security.User(ak)
	return a, nil
}

func (s *Server) authFailed(a callAuth, reason string) error {
	if g := s.opts.Guard; g != nil {
		g.Failed(a.host)
	}
	s.log.Warn("gRPC authentication failed", "host", a.host, "reason", reason)
	return grpcstatus.Error(codes.Unauthenticated, "authentication failed: "+reason)
}

// parseAuthorization splits the MQv2-HMAC-SHA1 header.
func parseAuthorization(h string) (ak, sig string, ok bool) {
	scheme, rest, found := strings.Cut(strings.TrimSpace(h), " ")
	if !found || scheme != "MQv2-HMAC-SHA1" {
		return "", "", false
	}
	for _, part := range strings.Split(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "Credential":
			ak, _, _ = strings.Cut(v, "/")
		case "Signature":
			sig = v
		}
	}
	return ak, sig, ak != "" && sig != ""
}

func first(md metadata.MD, key string) string {
	if v := md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// authorize checks the resources a request touches.
func (s *Server) authorize(a callAuth, req any) error {
	sec := s.opts.Security
	if !sec.AuthorizationEnabled() {
		return nil
	}
	for _, ch := range requestChecks(req) {
		if !sec.Authorize(a.p, a.host, ch.rt, ch.name, ch.op) {
			s.log.Info("gRPC request not authorized", "principal", a.p.String(), "resource", ch.rt, "name", ch.name, "operation", ch.op)
			return grpcstatus.Errorf(codes.PermissionDenied, "%s may not %s %s %s", a.p, ch.op, ch.rt, ch.name)
		}
	}
	return nil
}

type authCheck struct {
	rt   security.ResourceType
	name string
	op   security.Operation
}

func topicCheck(r *v2.Resource, op security.Operation) authCheck {
	name := r.GetName()
	if n, err := topicName(r); err == nil {
		name = n.Short()
	}
	return authCheck{security.ResourceTopic, name, op}
}

func groupCheck(r *v2.Resource, op security.Operation) authCheck {
	return authCheck{security.ResourceGroup, groupName(r), op}
}

// requestChecks lists what a request must be allowed; route lookups,
// heartbeats and telemetry need only an authenticated principal.
func requestChecks(req any) []authCheck {
	consume := func(topic, group *v2.Resource) []authCheck {
		return []authCheck{topicCheck(topic, security.OpRead), groupCheck(group, security.OpRead)}
	}
	switch r := req.(type) {
	case *v2.SendMessageRequest:
		var out []authCheck
		for _, m := range r.GetMessages() {
			out = append(out, topicCheck(m.GetTopic(), security.OpWrite))
		}
		return out
	case *v2.EndTransactionRequest:
		return []authCheck{topicCheck(r.GetTopic(), security.OpWrite)}
	case *v2.RecallMessageRequest:
		return []authCheck{topicCheck(r.GetTopic(), security.OpWrite)}
	case *v2.ReceiveMessageRequest:
		return consume(r.GetMessageQueue().GetTopic(), r.GetGroup())
	case *v2.AckMessageRequest:
		return consume(r.GetTopic(), r.GetGroup())
	case *v2.ChangeInvisibleDurationRequest:
		return consume(r.GetTopic(), r.GetGroup())
	case *v2.ForwardMessageToDeadLetterQueueRequest:
		return consume(r.GetTopic(), r.GetGroup())
	case *v2.QueryAssignmentRequest:
		return consume(r.GetTopic(), r.GetGroup())
	}
	return nil
}

func (s *Server) authUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if !s.authOn() {
		return h(ctx, req)
	}
	a, err := s.authenticate(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.authorize(a, req); err != nil {
		return nil, err
	}
	return h(context.WithValue(ctx, principalKey{}, a.p), req)
}

func (s *Server) authStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if !s.authOn() {
		return h(srv, ss)
	}
	a, err := s.authenticate(ss.Context())
	if err != nil {
		return err
	}
	return h(srv, &authorizedStream{ServerStream: ss, s: s, a: a})
}

type principalKey struct{}

// callUser is the user a call authenticated as ("" when anonymous), whose
// quotas its bytes count against.
func callUser(ctx context.Context) string {
	if p, ok := ctx.Value(principalKey{}).(security.Principal); ok && !p.IsAnonymous() {
		return p.Name
	}
	return ""
}

// authorizedStream checks each message a stream receives.
type authorizedStream struct {
	grpc.ServerStream
	s *Server
	a callAuth
}

func (w *authorizedStream) Context() context.Context {
	return context.WithValue(w.ServerStream.Context(), principalKey{}, w.a.p)
}

func (w *authorizedStream) RecvMsg(m any) error {
	if err := w.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return w.s.authorize(w.a, m)
}

package mqtt

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"time"
)

// The MQTT part of the admin API: sessions (connected or waiting for
// their clients) and retained messages.
//
//	GET /api/v1/mqtt/sessions   every session, by client identifier
//	GET /api/v1/mqtt/retained   retained messages' topics and sizes

// SessionView is one session in the admin API.
type SessionView struct {
	ClientID      string             `json:"client_id"`
	Connected     bool               `json:"connected"`
	Remote        string             `json:"remote,omitempty"`
	Version       int                `json:"protocol_level,omitempty"`
	ExpirySeconds int64              `json:"expiry_seconds"`
	Durable       bool               `json:"durable"`
	Subscriptions []SubscriptionView `json:"subscriptions"`
	InFlight      int                `json:"in_flight"`
}

// SubscriptionView is one of a session's subscriptions.
type SubscriptionView struct {
	Filter string `json:"filter"`
	QoS    byte   `json:"qos"`
	Shared bool   `json:"shared,omitempty"`
}

// RetainedView is one retained message.
type RetainedView struct {
	Topic string `json:"topic"`
	Bytes int    `json:"bytes"`
	QoS   byte   `json:"qos"`
}

// Sessions lists the sessions, by client identifier.
func (s *Server) Sessions() []SessionView {
	s.mu.Lock()
	all := make([]*session, 0, len(s.sessions))
	for _, ss := range s.sessions {
		all = append(all, ss)
	}
	s.mu.Unlock()
	out := make([]SessionView, 0, len(all))
	for _, ss := range all {
		ss.mu.Lock()
		v := SessionView{ClientID: ss.clientID, Connected: ss.conn != nil, ExpirySeconds: int64(ss.expiry / time.Second),
			Durable: ss.persisted, InFlight: len(ss.inflight), Subscriptions: []SubscriptionView{}}
		if c := ss.conn; c != nil {
			v.Remote, v.Version = c.nc.RemoteAddr().String(), int(c.version)
		}
		for f, sub := range ss.subs {
			v.Subscriptions = append(v.Subscriptions, SubscriptionView{Filter: f, QoS: sub.QoS})
		}
		for f, sh := range ss.shared {
			v.Subscriptions = append(v.Subscriptions, SubscriptionView{Filter: f, QoS: sh.QoS, Shared: true})
		}
		ss.mu.Unlock()
		slices.SortFunc(v.Subscriptions, func(a, b SubscriptionView) int { return strings.Compare(a.Filter, b.Filter) })
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b SessionView) int { return strings.Compare(a.ClientID, b.ClientID) })
	return out
}

// AdminHandler serves the MQTT part of the admin API; guard wraps each
// endpoint (the node's admin authentication).
func (s *Server) AdminHandler(guard func(http.HandlerFunc) http.HandlerFunc) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/mqtt/sessions", guard(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]any{"sessions": s.Sessions()})
	}))
	mux.HandleFunc("GET /api/v1/mqtt/retained", guard(func(w http.ResponseWriter, _ *http.Request) {
		s.retained.mu.Lock()
		out := make([]RetainedView, 0, len(s.retained.m))
		for t, m := range s.retained.m {
			out = append(out, RetainedView{Topic: t, Bytes: len(m.publish.Payload), QoS: m.publish.QoS})
		}
		s.retained.mu.Unlock()
		slices.SortFunc(out, func(a, b RetainedView) int { return strings.Compare(a.Topic, b.Topic) })
		writeJSON(w, map[string]any{"retained": out})
	}))
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

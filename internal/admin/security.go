package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sort"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rosettamq/rosetta/internal/broker/quota"
	"github.com/rosettamq/rosetta/internal/broker/security"
	"github.com/rosettamq/rosetta/internal/model"
)

// Security is what the admin API manages besides the broker: users,
// credentials and ACLs, and tenant and namespace quotas.
type Security struct {
	Service *security.Service
	Quotas  *quota.Manager
}

// Guard is guard for other packages' endpoints on the admin port (the
// Pulsar admin API).
func (s Security) Guard(next http.HandlerFunc) http.HandlerFunc { return s.guard(next) }

// guard authenticates and authorizes admin API calls when authorization
// is on: HTTP Basic (a user's password) or a Bearer JWT; reads need
// Describe on the cluster, changes Alter. With authorization off the API
// is open, as the rest of the node is.
func (s Security) guard(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sec := s.Service
		if sec == nil || !sec.AuthorizationEnabled() {
			next(w, r.WithContext(withActor(r, security.Anonymous)))
			return
		}
		var p security.Principal
		if user, pass, ok := r.BasicAuth(); ok && sec.VerifyPassword(user, pass) {
			p = security.User(user)
		} else if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
			if tp, _, err := sec.VerifyToken(tok); err == nil {
				p = tp
			}
		}
		if p == (security.Principal{}) {
			w.Header().Set("WWW-Authenticate", `Basic realm="rosetta"`)
			httpError(w, "authentication required", http.StatusUnauthorized)
			return
		}
		op := security.OpAlter
		if r.Method == http.MethodGet {
			op = security.OpDescribe
		}
		if !sec.Authorize(p, clientHost(r), security.ResourceCluster, security.ClusterResourceName, op) {
			httpError(w, p.String()+" may not "+op.String()+" the cluster", http.StatusForbidden)
			return
		}
		next(w, r.WithContext(withActor(r, p)))
	}
}

func clientHost(r *http.Request) string {
	if i := strings.LastIndexByte(r.RemoteAddr, ':'); i > 0 {
		return strings.Trim(r.RemoteAddr[:i], "[]")
	}
	return r.RemoteAddr
}

// register adds the users, ACLs and quotas endpoints.
func (s Security) register(mux *http.ServeMux) {
	if s.Service == nil {
		return
	}
	sec := s.Service
	mux.HandleFunc("GET /api/v1/users", s.guard(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, nonNil(sec.Users()))
	}))
	// PUT {"password": "...", "iterations": 4096, "namespace": "tenant/ns"}:
	// creates or updates a user (SCRAM credentials and the signing secret).
	mux.HandleFunc("PUT /api/v1/users/{name}", s.guard(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Password   *string `json:"password"`
			Iterations int     `json:"iterations"`
			Namespace  *string `json:"namespace"`
		}
		if !readJSON(w, r, &body) {
			return
		}
		name, actor := r.PathValue("name"), actorOf(r)
		var err error
		if body.Password != nil {
			err = sec.SetPassword(r.Context(), actor, name, *body.Password, body.Iterations)
		}
		if err == nil && body.Namespace != nil {
			err = sec.SetUserNamespace(r.Context(), actor, name, *body.Namespace)
		}
		if err == nil && body.Password == nil && body.Namespace == nil {
			err = errors.New("nothing to set: give password and/or namespace")
		}
		reply(w, err, sec.Users(name))
	}))
	mux.HandleFunc("DELETE /api/v1/users/{name}", s.guard(func(w http.ResponseWriter, r *http.Request) {
		reply(w, sec.DeleteUser(r.Context(), actorOf(r), r.PathValue("name")), nil)
	}))
	// GET with query parameters as filter fields (principal=User:alice,
	// resourceType=topic, …).
	mux.HandleFunc("GET /api/v1/acls", s.guard(func(w http.ResponseWriter, r *http.Request) {
		f, err := filterFromQuery(r)
		if err != nil {
			httpError(w, err.Error(), http.StatusBadRequest)
			return
		}
		writeJSON(w, nonNil(sec.DescribeACLs(f)))
	}))
	// POST a list of bindings.
	mux.HandleFunc("POST /api/v1/acls", s.guard(func(w http.ResponseWriter, r *http.Request) {
		var bs []security.Binding
		if !readJSON(w, r, &bs) {
			return
		}
		for i := range bs {
			if bs[i].Host == "" {
				bs[i].Host = security.Wildcard
			}
		}
		reply(w, errors.Join(sec.CreateACLs(r.Context(), actorOf(r), bs)...), bs)
	}))
	// DELETE with query parameters as one filter; answers what it removed.
	mux.HandleFunc("DELETE /api/v1/acls", s.guard(func(w http.ResponseWriter, r *http.Request) {
		f, err := filterFromQuery(r)
		if err != nil {
			httpError(w, err.Error(), http.StatusBadRequest)
			return
		}
		removed, err := sec.DeleteACLs(r.Context(), actorOf(r), []security.Filter{f})
		var out []security.Binding
		if len(removed) > 0 {
			out = removed[0]
		}
		reply(w, err, nonNil(out))
	}))
	if s.Quotas == nil {
		return
	}
	q := s.Quotas
	mux.HandleFunc("GET /api/v1/quotas", s.guard(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, nonNil(quotaReport(q)))
	}))
	// PUT Limits to /api/v1/quotas/tenant/acme or
	// /api/v1/quotas/namespace/acme/prod; all zero removes them.
	mux.HandleFunc("PUT /api/v1/quotas/{kind}/{name...}", s.guard(func(w http.ResponseWriter, r *http.Request) {
		var l quota.Limits
		if !readJSON(w, r, &l) {
			return
		}
		e := quota.Entity{Kind: r.PathValue("kind"), Name: r.PathValue("name")}
		reply(w, q.Set(r.Context(), actorOf(r).String(), e, l), l)
	}))
	mux.HandleFunc("DELETE /api/v1/quotas/{kind}/{name...}", s.guard(func(w http.ResponseWriter, r *http.Request) {
		e := quota.Entity{Kind: r.PathValue("kind"), Name: r.PathValue("name")}
		reply(w, q.Set(r.Context(), actorOf(r).String(), e, quota.Limits{}), nil)
	}))
	// Tenants and namespaces with their limits and what they hold.
	mux.HandleFunc("GET /api/v1/tenants", s.guard(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, nonNil(quotaReport(q)))
	}))
}

// quotaEntry is one entity in the quota report.
type quotaEntry struct {
	Entity  string        `json:"entity"`
	Limits  *quota.Limits `json:"limits,omitempty"`
	Usage   quota.Usage   `json:"usage"`
	Produce *quota.Stats  `json:"produce,omitempty"`
	Fetch   *quota.Stats  `json:"fetch,omitempty"`
}

func quotaReport(q *quota.Manager) []quotaEntry {
	limits, usage, stats := q.List(), q.Usage(), q.Stats()
	seen := map[quota.Entity]bool{}
	for e := range limits {
		seen[e] = true
	}
	for e := range usage {
		seen[e] = true
	}
	out := make([]quotaEntry, 0, len(seen))
	for e := range seen {
		en := quotaEntry{Entity: e.String(), Usage: usage[e]}
		if l, ok := limits[e]; ok {
			en.Limits = &l
		}
		if st, ok := stats[e][quota.Produce]; ok {
			en.Produce = &st
		}
		if st, ok := stats[e][quota.Fetch]; ok {
			en.Fetch = &st
		}
		out = append(out, en)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Entity < out[j].Entity })
	return out
}

func filterFromQuery(r *http.Request) (security.Filter, error) {
	q := r.URL.Query()
	f := security.Filter{ResourceName: q.Get("resourceName"), Principal: q.Get("principal"), Host: q.Get("host")}
	var errs []error
	parse := func(key string, into interface{ UnmarshalText([]byte) error }) {
		if v := q.Get(key); v != "" {
			errs = append(errs, into.UnmarshalText([]byte(v)))
		}
	}
	parse("resourceType", &f.ResourceType)
	parse("patternType", &f.PatternType)
	parse("operation", &f.Operation)
	parse("permission", &f.Permission)
	return f, errors.Join(errs...)
}

type actorKey struct{}

func withActor(r *http.Request, p security.Principal) context.Context {
	return context.WithValue(r.Context(), actorKey{}, p)
}

func actorOf(r *http.Request) security.Principal {
	if p, ok := r.Context().Value(actorKey{}).(security.Principal); ok {
		return p
	}
	return security.Anonymous
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// reply answers a change: its error's status, or the value.
func reply(w http.ResponseWriter, err error, v any) {
	switch {
	case err == nil && v == nil:
		w.WriteHeader(http.StatusNoContent)
	case err == nil:
		writeJSON(w, v)
	case errors.Is(err, security.ErrNoUser):
		httpError(w, err.Error(), http.StatusNotFound)
	case errors.Is(err, security.ErrInvalid), errors.Is(err, model.ErrInvalidConfig), errors.Is(err, security.ErrUnsupportedMechanism):
		httpError(w, err.Error(), http.StatusBadRequest)
	default:
		httpError(w, err.Error(), http.StatusBadRequest)
	}
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// quotaCollector exports the quota state at scrape time.
type quotaCollector struct {
	q                                  *quota.Manager
	limit, storage, topics, bytes, thr *prometheus.Desc
	refused, conns                     *prometheus.Desc
}

func newQuotaCollector(q *quota.Manager) *quotaCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("rosetta_quota_"+name, help, append([]string{"entity"}, labels...), nil)
	}
	return &quotaCollector{q: q,
		limit:   d("limit", "A tenant's or namespace's limit (bytes per second, bytes or topics).", "quota"),
		storage: d("storage_bytes", "Bytes a tenant or namespace holds."),
		topics:  d("topics", "Topics a tenant or namespace has."),
		bytes:   d("bytes_total", "Bytes charged to a rate quota since start.", "direction"),
		thr:     d("throttle_seconds_total", "Throttle time handed to Kafka clients since start.", "direction"),
		refused: d("refused_total", "Requests refused as busy while over a rate quota since start.", "direction"),
		conns:   d("connections", "Authenticated connections counted against connection quotas."),
	}
}

func (c *quotaCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.limit, c.storage, c.topics, c.bytes, c.thr, c.refused, c.conns} {
		ch <- d
	}
}

func (c *quotaCollector) Collect(ch chan<- prometheus.Metric) {
	for e, l := range c.q.List() {
		for name, v := range map[string]int64{"produce_bytes_per_second": l.ProduceBytesPerSecond, "fetch_bytes_per_second": l.FetchBytesPerSecond,
			"storage_bytes": l.StorageBytes, "topics": int64(l.Topics), "connections": int64(l.Connections)} {
			if v > 0 {
				ch <- prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, float64(v), e.String(), name)
			}
		}
	}
	for e, u := range c.q.Usage() {
		ch <- prometheus.MustNewConstMetric(c.storage, prometheus.GaugeValue, float64(u.StorageBytes), e.String())
		ch <- prometheus.MustNewConstMetric(c.topics, prometheus.GaugeValue, float64(u.Topics), e.String())
	}
	for e, n := range c.q.Connections() {
		ch <- prometheus.MustNewConstMetric(c.conns, prometheus.GaugeValue, float64(n), e.String())
	}
	for e, byDir := range c.q.Stats() {
		for d, st := range byDir {
			ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.CounterValue, float64(st.Bytes), e.String(), d.String())
			ch <- prometheus.MustNewConstMetric(c.thr, prometheus.CounterValue, st.Throttled.Seconds(), e.String(), d.String())
			ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(st.Refused), e.String(), d.String())
		}
	}
}

package pulsar

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/model"
)

// Tenants and namespaces: those made over the admin API (kept with their
// JSON body in the metadata store), public and public/default, and those
// holding topics.

// tenants lists every known tenant.
func (s *Server) tenants(r *http.Request) ([]string, error) {
	kvs, err := s.b.Meta().List(r.Context(), tenantPrefix)
	if err != nil {
		return nil, err
	}
	set := map[string]bool{model.DefaultTenant: true}
	for _, kv := range kvs {
		set[strings.TrimPrefix(kv.Key, tenantPrefix)] = true
	}
	for _, t := range s.b.Topics(false) {
		set[t.Name.Tenant] = true
	}
	return sortedKeys(set), nil
}

// namespaces lists a tenant's namespaces as tenant/namespace.
func (s *Server) namespaces(r *http.Request, tenant string) ([]string, error) {
	kvs, err := s.b.Meta().List(r.Context(), namespacePrefix+tenant+"/")
	if err != nil {
		return nil, err
	}
	set := map[string]bool{}
	if tenant == model.DefaultTenant {
		set[tenant+"/"+model.DefaultNamespace] = true
	}
	for _, kv := range kvs {
		set[strings.TrimPrefix(kv.Key, namespacePrefix)] = true
	}
	for _, t := range s.b.Topics(false) {
		if t.Name.Tenant == tenant {
			set[tenant+"/"+t.Name.Namespace] = true
		}
	}
	return sortedKeys(set), nil
}

func sortedKeys(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func (s *Server) adminTenants(w http.ResponseWriter, r *http.Request) {
	list, err := s.tenants(r)
	if err != nil {
		adminFail(w, err)
		return
	}
	adminJSON(w, list)
}

func (s *Server) adminTenant(w http.ResponseWriter, r *http.Request) {
	tenant := r.PathValue("tenant")
	kv, err := s.b.Meta().Get(r.Context(), tenantPrefix+tenant)
	if err == nil {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(kv.Value)
		return
	}
	list, lerr := s.tenants(r)
	if lerr == nil && slices.Contains(list, tenant) {
		adminJSON(w, map[string]any{"adminRoles": []string{}, "allowedClusters": []string{"standalone"}})
		return
	}
	adminError(w, http.StatusNotFound, "Tenant does not exist")
}

// readPolicies reads a JSON body (an object, or nothing) to keep.
func readPolicies(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil {
		return nil, err
	}
	if len(strings.TrimSpace(string(b))) == 0 || strings.TrimSpace(string(b)) == "null" {
		return []byte("{}"), nil
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("%w: %v", errBadRequest, err)
	}
	return b, nil
}

// putKey stores key; create refuses one that exists.
func (s *Server) putKey(r *http.Request, key string, value []byte, create bool) error {
	var cmps []meta.Compare
	if create {
		cmps = []meta.Compare{{Key: key, Target: meta.CompareCreate, Revision: 0}}
	}
	_, err := s.b.Meta().Txn(r.Context(), cmps, []meta.Op{{Key: key, Value: value}})
	if err != nil && create {
		return fmt.Errorf("%w: %v", errExists, err)
	}
	return err
}

func (s *Server) adminPutTenant(w http.ResponseWriter, r *http.Request) {
	tenant := r.PathValue("tenant")
	body, err := readPolicies(r)
	if err == nil {
		_, err = model.ParseTopicName(tenant + "/ns/t")
	}
	if err == nil {
		err = s.putKey(r, tenantPrefix+tenant, body, r.Method == http.MethodPut)
	}
	if err != nil {
		adminFail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) adminDeleteTenant(w http.ResponseWriter, r *http.Request) {
	tenant := r.PathValue("tenant")
	nss, err := s.namespaces(r, tenant)
	if err == nil && len(nss) > 0 && r.URL.Query().Get("force") != "true" {
		err = fmt.Errorf("%w: the tenant still has namespaces", errPrecondition)
	}
	if err == nil {
		_, err = s.b.Meta().Txn(r.Context(), nil, []meta.Op{{Key: tenantPrefix + tenant, Delete: true}})
	}
	if err != nil {
		adminFail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) adminNamespaces(w http.ResponseWriter, r *http.Request) {
	list, err := s.namespaces(r, r.PathValue("tenant"))
	if err != nil {
		adminFail(w, err)
		return
	}
	adminJSON(w, list)
}

func (s *Server) adminNamespace(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("tenant") + "/" + r.PathValue("ns")
	kv, err := s.b.Meta().Get(r.Context(), namespacePrefix+name)
	if err == nil {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(kv.Value)
		return
	}
	list, lerr := s.namespaces(r, r.PathValue("tenant"))
	if lerr == nil && slices.Contains(list, name) {
		adminJSON(w, map[string]any{})
		return
	}
	adminError(w, http.StatusNotFound, "Namespace does not exist")
}

func (s *Server) adminPutNamespace(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("tenant") + "/" + r.PathValue("ns")
	body, err := readPolicies(r)
	if err == nil {
		_, err = model.ParseTopicName(name + "/t")
	}
	if err == nil {
		err = s.putKey(r, namespacePrefix+name, body, true)
	}
	if err != nil {
		adminFail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) adminDeleteNamespace(w http.ResponseWriter, r *http.Request) {
	tenant, ns := r.PathValue("tenant"), r.PathValue("ns")
	force := r.URL.Query().Get("force") == "true"
	var err error
	for _, t := range s.b.Topics(false) {
		if t.Name.Tenant != tenant || t.Name.Namespace != ns {
			continue
		}
		if !force {
			err = fmt.Errorf("%w: the namespace still has topics", errPrecondition)
			break
		}
		if err = s.b.DeleteTopic(r.Context(), t.Name); err != nil {
			break
		}
	}
	if err == nil {
		_, err = s.b.Meta().Txn(r.Context(), nil, []meta.Op{{Key: namespacePrefix + tenant + "/" + ns, Delete: true}})
	}
	if err != nil {
		adminFail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

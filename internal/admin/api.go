package admin

import (
	"encoding/json"
	"errors"
	"net/http"
	"unicode/utf8"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/model"
)

// The admin API v1 (JSON): every answer is JSON; an error is
// {"error":{"code":"…","message":"…"}} with a 4xx or 5xx status, the code
// one a script can rely on (openapi.go lists them with the paths).

// apiError writes an error answer; code defaults to one derived from status.
func apiError(w http.ResponseWriter, status int, code, message string) {
	if code == "" {
		code = statusCode(status)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": message}})
}

// writeJSONStatus answers v with a status other than 200.
func writeJSONStatus(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// httpError is http.Error's shape for the API: a JSON error answer.
func httpError(w http.ResponseWriter, message string, status int) {
	apiError(w, status, "", message)
}

func statusCode(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "bad_request"
	case http.StatusUnauthorized:
		return "unauthenticated"
	case http.StatusForbidden:
		return "forbidden"
	case http.StatusNotFound:
		return "not_found"
	case http.StatusConflict:
		return "conflict"
	case http.StatusServiceUnavailable:
		return "unavailable"
	}
	if status >= 500 {
		return "internal"
	}
	return "error"
}

// writeErr maps a broker error to its status and code.
func writeErr(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, model.ErrUnknownTopic):
		apiError(w, http.StatusNotFound, "topic_not_found", err.Error())
	case errors.Is(err, model.ErrUnknownQueue):
		apiError(w, http.StatusNotFound, "queue_not_found", err.Error())
	case errors.Is(err, model.ErrNotFound):
		apiError(w, http.StatusNotFound, "not_found", err.Error())
	case errors.Is(err, model.ErrTopicExists):
		apiError(w, http.StatusConflict, "topic_exists", err.Error())
	case errors.Is(err, model.ErrInvalidTopic):
		apiError(w, http.StatusBadRequest, "invalid_topic", err.Error())
	case errors.Is(err, model.ErrInvalidQueueCount), errors.Is(err, model.ErrInvalidConfig):
		apiError(w, http.StatusBadRequest, "invalid_request", err.Error())
	case errors.Is(err, model.ErrOffsetOutOfRange):
		apiError(w, http.StatusBadRequest, "offset_out_of_range", err.Error())
	case errors.Is(err, model.ErrDiskFull):
		apiError(w, http.StatusServiceUnavailable, "disk_full", err.Error())
	case errors.Is(err, model.ErrNotLeader):
		apiError(w, http.StatusServiceUnavailable, "not_leader", err.Error())
	default:
		apiError(w, http.StatusInternalServerError, "internal", err.Error())
	}
}

// readJSON decodes a request body of at most 1 MiB into v.
func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		apiError(w, http.StatusBadRequest, "bad_request", "request body: "+err.Error())
		return false
	}
	return true
}

// topicParam resolves the {topic} path segment (a name with slashes, such
// as tenant/namespace/topic, comes escaped: %2F).
func topicParam(w http.ResponseWriter, r *http.Request, b *broker.Broker) (*broker.Topic, bool) {
	name, err := model.ParseTopicName(r.PathValue("topic"))
	if err != nil {
		writeErr(w, err)
		return nil, false
	}
	t, err := b.Topic(name)
	if err != nil {
		writeErr(w, err)
		return nil, false
	}
	return t, true
}

// isText reports whether a body reads as text (shown as is rather than in
// base64): valid UTF-8 without control characters other than white space.
func isText(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if r < 0x20 && r != '\n' && r != '\r' && r != '\t' || r == 0x7f {
			return false
		}
	}
	return true
}

package admin

import (
	"reflect"
	"strconv"
	"strings"

	"github.com/rosettamq/rosetta/internal/apiv1"
	"github.com/rosettamq/rosetta/internal/broker"
)

// openAPI describes the admin API v1 as an OpenAPI 3 document (served at
// /api/v1/openapi.json); schemas come from the Go types the handlers
// answer with, so they cannot drift from them.
func openAPI() map[string]any {
	schemas := map[string]any{
		"Error": map[string]any{"type": "object", "properties": map[string]any{"error": map[string]any{
			"type": "object", "properties": map[string]any{
				"code":    map[string]any{"type": "string", "description": "stable, for scripts: bad_request, unauthenticated, forbidden, not_found, topic_not_found, queue_not_found, group_not_found, topic_exists, invalid_topic, invalid_request, offset_out_of_range, internal_topic, conflict, group_not_empty, not_leader, disk_full, unavailable, internal"},
				"message": map[string]any{"type": "string"}}}}},
	}
	ref := func(v any) map[string]any { return schemaRef(schemas, reflect.TypeOf(v)) }
	arr := func(v any) map[string]any { return map[string]any{"type": "array", "items": ref(v)} }
	path := func(name, desc string) map[string]any {
		return map[string]any{"name": name, "in": "path", "required": true, "description": desc, "schema": map[string]any{"type": "string"}}
	}
	query := func(name, typ, desc string) map[string]any {
		return map[string]any{"name": name, "in": "query", "description": desc, "schema": map[string]any{"type": typ}}
	}
	topic := path("topic", "topic name; tenant/namespace/topic with slashes escaped as %2F")
	group := path("group", "consumer group name")
	op := func(summary string, ok int, schema map[string]any, params ...map[string]any) map[string]any {
		resp := map[string]any{"description": "success"}
		if schema != nil {
			resp["content"] = map[string]any{"application/json": map[string]any{"schema": schema}}
		}
		o := map[string]any{"summary": summary, "responses": map[string]any{
			strconv.Itoa(ok): resp,
			"default":        map[string]any{"description": "error", "content": map[string]any{"application/json": map[string]any{"schema": map[string]any{"$ref": "#/components/schemas/Error"}}}},
		}}
		if len(params) > 0 {
			o["parameters"] = params
		}
		return o
	}
	withBody := func(o map[string]any, schema map[string]any) map[string]any {
		o["requestBody"] = map[string]any{"required": true, "content": map[string]any{"application/json": map[string]any{"schema": schema}}}
		return o
	}
	anyObject := map[string]any{"type": "object"}
	paths := map[string]any{
		"/api/v1/openapi.json": map[string]any{"get": op("this document", 200, anyObject)},
		"/api/v1/cluster":      map[string]any{"get": op("the node, the cluster's nodes and replication groups", 200, anyObject)},
		"/api/v1/cluster/members": map[string]any{
			"post": withBody(op("add a member to the cluster (cluster members only); answers once every group added it as a learner", 200, anyObject), anyObject),
		},
		"/api/v1/cluster/members/{node}": map[string]any{
			"delete": op("remove a member from the cluster (cluster members only); answers once no group has it", 200, anyObject),
		},
		"/api/v1/cluster/groups/{group}/leader": map[string]any{
			"post": withBody(op("hand a replication group's leadership to a member holding a replica of it ({\"node\": id}; cluster members only)", 200, anyObject), anyObject),
		},
		"/api/v1/topics": map[string]any{
			"get":  op("list topics with queue counts, messages held, bytes and retention", 200, arr(apiv1.TopicSummary{}), query("internal", "boolean", "include the broker's internal topics")),
			"post": withBody(op("create a topic", 201, ref(apiv1.TopicDetail{})), ref(apiv1.TopicCreate{})),
		},
		"/api/v1/topics/{topic}": map[string]any{
			"get":    op("a topic with its queues (start, end, bytes) and configuration", 200, ref(apiv1.TopicDetail{}), topic),
			"patch":  withBody(op("change a topic's settings (those given) and grow its queues", 200, ref(apiv1.TopicDetail{}), topic), ref(apiv1.TopicAlter{})),
			"delete": op("delete a topic and its messages", 204, nil, topic),
		},
		"/api/v1/topics/{topic}/messages": map[string]any{
			"get": op("browse a queue a page at a time", 200, ref(apiv1.MessagePage{}), topic,
				query("queue", "integer", "queue (Kafka partition, RocketMQ queue id); default 0"),
				query("offset", "integer", "start at this offset"),
				query("time_ms", "integer", "start at the first message stored at or after this time (ms since the epoch)"),
				query("from", "string", "oldest (default) or newest: the last limit messages"),
				query("limit", "integer", "messages per page, 1..500 (default 20)")),
			"post": withBody(op("produce a message", 201, ref(apiv1.MessageSent{}), topic), ref(apiv1.MessageSend{})),
		},
		"/api/v1/messages": map[string]any{
			"get": op("find messages by key: RocketMQ KEYS or message id (UNIQ_KEY), indexed Kafka keys", 200, arr(apiv1.MessageView{}),
				query("key", "string", "the key (required)"), query("topic", "string", "only in this topic"),
				query("limit", "integer", "at most this many, 1..500 (default 32)")),
		},
		"/api/v1/groups": map[string]any{"get": op("list consumer groups with committed offsets, and their lag", 200, arr(apiv1.GroupSummary{}))},
		"/api/v1/groups/{group}": map[string]any{
			"get":    op("a group's committed offsets, ends and lag per queue", 200, ref(apiv1.GroupDetail{}), group),
			"delete": op("forget a group's committed offsets", 204, nil, group),
		},
		"/api/v1/groups/{group}/reset": map[string]any{
			"post": withBody(op("move a group's committed offsets (stop its consumers first)", 200, arr(apiv1.OffsetMove{}), group), ref(apiv1.OffsetReset{})),
		},
		"/api/v1/deadletters": map[string]any{"get": op("groups with dead letters (%DLQ%<group>): count, bytes, offsets", 200, arr(apiv1.DeadLetterSummary{}))},
		"/api/v1/groups/{group}/offsets": map[string]any{
			"post": withBody(op("record offsets a reset computed, by topic-wide queue (what a cluster's admin API asks each replication group)", 204, nil, group),
				arr(apiv1.OffsetMove{})),
		},
		"/api/v1/deadletters/{group}/messages": map[string]any{
			"get": op("browse a group's dead letters (each with its origin topic)", 200, ref(apiv1.MessagePage{}), group,
				query("queue", "integer", "the dead-letter queue (a cluster of several replication groups has one per group)"),
				query("offset", "integer", "start at this offset"), query("from", "string", "oldest (default) or newest"),
				query("limit", "integer", "messages per page, 1..500 (default 20)")),
		},
		"/api/v1/deadletters/{group}/redrive": map[string]any{
			"post": withBody(op("send dead letters back to their origin topic (or the group's retry topic); they stay in the dead-letter topic", 200,
				ref(apiv1.RedriveResult{}), group), ref(apiv1.Redrive{})),
		},
		"/api/v1/transactions": map[string]any{"get": op("transactions in doubt: open Kafka transactions, pending RocketMQ half messages", 200, ref(apiv1.Transactions{}))},
		"/api/v1/transactions/kafka/{id}/abort": map[string]any{
			"post": op("abort a Kafka transaction now (its producer is fenced)", 204, nil, path("id", "transactional id")),
		},
		"/api/v1/transactions/rocketmq/{offset}/{action}": map[string]any{
			"post": op("commit (answers where the message went) or roll back a pending half message", 200, ref(apiv1.MessageSent{}),
				path("offset", "the half message's offset, as listed"), path("action", "commit or rollback")),
		},
		"/api/v1/storage":             map[string]any{"get": op("storage usage: segments, bytes, disk", 200, anyObject)},
		"/api/v1/storage/gc":          map[string]any{"post": op("run a garbage-collection pass", 200, anyObject, query("threshold", "number", "relocate segments less live than this (0..1], default 0.5"))},
		"/api/v1/storage/compact":     map[string]any{"post": op("clean every compacted topic now", 200, anyObject)},
		"/api/v1/storage/retention":   map[string]any{"post": op("run a retention pass now", 200, anyObject)},
		"/api/v1/storage/tier":        map[string]any{"get": op("tiered storage: totals, upload lag, cold reads, the last upload error, every tiered segment", 200, anyObject)},
		"/api/v1/storage/tier/upload": map[string]any{"post": op("upload the sealed segments not tiered yet now", 200, anyObject)},
		"/api/v1/trace": map[string]any{"get": op("a message's recorded lifecycle (topics with message_trace on): produced, delivered, acknowledged, retried, dead-lettered, timer fired, transaction committed or rolled back", 200,
			ref(apiv1.MessageTrace{}), query("id", "string", "the message's unique id (RocketMQ msgId / UNIQ_KEY)"),
			query("topic", "string", "or its topic,"), query("queue", "integer", "queue"), query("offset", "integer", "and offset"))},
		"/api/v1/timers": map[string]any{"get": op("pending timer and delayed messages, the earliest first", 200, ref(apiv1.PendingTimers{}),
			query("topic", "string", "only those for this topic"), query("limit", "integer", "1..1000 (default 100)"))},
		"/api/v1/timers/{id}": map[string]any{"delete": op("cancel a pending timer or delayed message", 204, nil,
			path("id", "the message's unique id"), query("topic", "string", "its topic"))},
		"/api/v1/users": map[string]any{"get": op("list users", 200, anyObject)},
		"/api/v1/users/{name}": map[string]any{
			"put":    withBody(op("create or change a user", 200, anyObject, path("name", "user name")), anyObject),
			"delete": op("delete a user", 204, nil, path("name", "user name")),
		},
		"/api/v1/acls": map[string]any{
			"get":    op("list ACL bindings matching a filter", 200, anyObject),
			"post":   withBody(op("add ACL bindings", 200, anyObject), anyObject),
			"delete": op("delete ACL bindings matching a filter", 200, anyObject),
		},
		"/api/v1/quotas": map[string]any{"get": op("quotas and usage", 200, anyObject)},
		"/api/v1/quotas/{kind}/{name}": map[string]any{
			"put":    withBody(op("set a quota", 200, anyObject, path("kind", "tenant or namespace"), path("name", "its name")), anyObject),
			"delete": op("remove a quota", 200, anyObject, path("kind", "tenant or namespace"), path("name", "its name")),
		},
		"/api/v1/tenants": map[string]any{"get": op("tenants and their namespaces", 200, anyObject)},
	}
	return map[string]any{
		"openapi": "3.0.3",
		"info": map[string]any{"title": "Rosetta admin API", "version": "1",
			"description": "Errors answer {\"error\":{\"code\",\"message\"}} with a 4xx or 5xx status. With authorization on, requests authenticate with HTTP basic auth as a user allowed to alter the cluster."},
		"paths":      paths,
		"components": map[string]any{"schemas": schemas, "securitySchemes": map[string]any{"basic": map[string]any{"type": "http", "scheme": "basic"}}},
		"security":   []any{map[string]any{"basic": []any{}}},
	}
}

// schemaRef returns a reference to t's schema, adding it (and the types it
// holds) to schemas.
func schemaRef(schemas map[string]any, t reflect.Type) map[string]any {
	switch t.Kind() {
	case reflect.Pointer:
		return schemaRef(schemas, t.Elem())
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer"}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.Slice, reflect.Array:
		return map[string]any{"type": "array", "items": schemaRef(schemas, t.Elem())}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": schemaRef(schemas, t.Elem())}
	case reflect.Struct:
	default:
		return map[string]any{}
	}
	name := t.Name()
	if t == reflect.TypeOf(broker.TopicConfig{}) {
		name = "apiv1.TopicConfig"
	}
	if name == "topicCreate" {
		name = "apiv1.TopicCreate"
	}
	if _, ok := schemas[name]; !ok {
		schemas[name] = nil // breaks cycles
		props := map[string]any{}
		addFields(schemas, t, props)
		schemas[name] = map[string]any{"type": "object", "properties": props}
	}
	return map[string]any{"$ref": "#/components/schemas/" + name}
}

func addFields(schemas map[string]any, t reflect.Type, props map[string]any) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || !f.IsExported() {
			continue
		}
		if f.Anonymous && tag == "" {
			addFields(schemas, f.Type, props)
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		props[name] = schemaRef(schemas, f.Type)
	}
}

// Package telemetry exports the broker's OpenTelemetry spans — a produce,
// a send, a fetch, a pull — over OTLP/HTTP to a collector. A span joins
// the client's trace when the message carries a W3C traceparent (a Kafka
// record header, a RocketMQ property named traceparent); otherwise it
// starts one, sampled at the configured ratio. A nil *Tracer is off and
// costs nothing.
package telemetry

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// HeaderTraceParent is the W3C trace context header (and RocketMQ
// property) a span's parent comes from.
const HeaderTraceParent = "traceparent"

// Config says where spans go.
type Config struct {
	// Endpoint is the collector's OTLP/HTTP URL (http://host:4318; the
	// path defaults to /v1/traces). Empty: no tracing.
	Endpoint string
	// SampleRatio is the share of traces the broker starts that it
	// records (those a client started follow the client's decision).
	SampleRatio float64
	ServiceName string
	NodeID      int
	// BatchTimeout is how long spans wait to be sent together (default 5 s).
	BatchTimeout time.Duration
}

// Tracer starts the broker's spans.
type Tracer struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
}

// New returns a tracer exporting to cfg.Endpoint, or nil when it is empty.
func New(ctx context.Context, cfg Config) (*Tracer, error) {
	if cfg.Endpoint == "" {
		return nil, nil
	}
	u, err := url.Parse(cfg.Endpoint)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("telemetry endpoint %q: want an http(s) URL", cfg.Endpoint)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(u.String()))
	if err != nil {
		return nil, fmt.Errorf("telemetry exporter: %w", err)
	}
	if cfg.ServiceName == "" {
		cfg.ServiceName = "rosetta"
	}
	opts := []sdktrace.BatchSpanProcessorOption{}
	if cfg.BatchTimeout > 0 {
		opts = append(opts, sdktrace.WithBatchTimeout(cfg.BatchTimeout))
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, opts...),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRatio))),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", cfg.ServiceName),
			attribute.Int("rosetta.node_id", cfg.NodeID))))
	return &Tracer{provider: tp, tracer: tp.Tracer("github.com/rosettamq/rosetta")}, nil
}

// Enabled reports whether spans are recorded at all.
func (t *Tracer) Enabled() bool { return t != nil }

// Start begins a span at start, a child of traceparent when it is a valid
// W3C trace context. With t nil it returns a span that records nothing.
func (t *Tracer) Start(ctx context.Context, name, traceparent string, kind trace.SpanKind, start time.Time, attrs ...attribute.KeyValue) trace.Span {
	if t == nil {
		return trace.SpanFromContext(context.Background())
	}
	if traceparent != "" {
		ctx = propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{HeaderTraceParent: traceparent})
	}
	_, span := t.tracer.Start(ctx, name, trace.WithSpanKind(kind), trace.WithTimestamp(start), trace.WithAttributes(attrs...))
	return span
}

// Shutdown sends what is pending and stops.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

// Delivered gathers what a delivery span says of the messages handed over:
// how many, and the trace contexts they carry.
type Delivered struct {
	Count   int
	parents []string
}

// Add counts one message, with its traceparent header (empty: none).
func (d *Delivered) Add(traceparent []byte) {
	d.Count++
	if len(traceparent) > 0 {
		d.parents = append(d.parents, string(traceparent))
	}
}

// Deliver records a span for handing messages to a consumer (a pull, a POP,
// a receive), begun at start and linked to the trace of every message that
// carries a W3C traceparent (OpenTelemetry's messaging conventions link a
// receive to the messages' creation contexts rather than parent it to one).
func (t *Tracer) Deliver(ctx context.Context, name string, start time.Time, d *Delivered, attrs ...attribute.KeyValue) {
	if t == nil || d.Count == 0 {
		return
	}
	links := make([]trace.Link, 0, len(d.parents))
	seen := map[trace.SpanID]bool{}
	for _, p := range d.parents {
		sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(),
			propagation.MapCarrier{HeaderTraceParent: p}))
		if sc.IsValid() && !seen[sc.SpanID()] {
			seen[sc.SpanID()] = true
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	attrs = append(attrs, attribute.String("messaging.operation.type", "receive"), attribute.Int("messaging.batch.message_count", d.Count))
	_, span := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(start),
		trace.WithLinks(links...), trace.WithAttributes(attrs...))
	span.End()
}

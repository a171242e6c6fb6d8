package meta

import (
	"context"
	"log/slog"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// ZapLogger is a zap logger writing etcd's records at or above warnings
// to log (etcd's server and client log through zap).
func ZapLogger(log *slog.Logger) *zap.Logger {
	return zap.New(&slogCore{log: log, level: zapcore.WarnLevel})
}

// slogCore writes etcd's zap records at or above level to slog.
type slogCore struct {
	log    *slog.Logger
	level  zapcore.Level
	fields []zapcore.Field
}

func (c *slogCore) Enabled(l zapcore.Level) bool { return l >= c.level }

func (c *slogCore) With(fields []zapcore.Field) zapcore.Core {
	return &slogCore{log: c.log, level: c.level, fields: append(append([]zapcore.Field(nil), c.fields...), fields...)}
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fields {
		f.AddTo(enc)
	}
	attrs := make([]any, 0, 2*len(enc.Fields))
	for k, v := range enc.Fields {
		attrs = append(attrs, k, v)
	}
	level := slog.LevelInfo
	switch {
	case e.Level >= zapcore.ErrorLevel:
		level = slog.LevelError
	case e.Level >= zapcore.WarnLevel:
		level = slog.LevelWarn
	case e.Level < zapcore.InfoLevel:
		level = slog.LevelDebug
	}
	c.log.Log(context.Background(), level, e.Message, attrs...)
	return nil
}

func (c *slogCore) Sync() error { return nil }

package model

import (
	"fmt"
	"strings"
)

// Default tenant and namespace for short names.
const (
	DefaultTenant    = "public"
	DefaultNamespace = "default"
	maxNameLen       = 249
)

// TopicName is a fully qualified tenant/namespace/topic name.
type TopicName struct {
	Tenant    string
	Namespace string
	Topic     string
}

// String renders tenant/namespace/topic.
func (n TopicName) String() string { return n.Tenant + "/" + n.Namespace + "/" + n.Topic }

// Short is the name a protocol client uses, the shortest that
// ParseTopicName maps back: just the topic in public/default, namespace/topic
// in the default tenant, otherwise the full name.
func (n TopicName) Short() string {
	switch {
	case n.Tenant == DefaultTenant && n.Namespace == DefaultNamespace:
		return n.Topic
	case n.Tenant == DefaultTenant:
		return n.Namespace + "/" + n.Topic
	}
	return n.String()
}

// ParseTopicName accepts "topic", "namespace/topic" (in the default tenant)
// or "tenant/namespace/topic" and validates each part.
func ParseTopicName(s string) (TopicName, error) {
	var n TopicName
	first := strings.IndexByte(s, '/')
	switch {
	case first < 0:
		n = TopicName{DefaultTenant, DefaultNamespace, s}
	case strings.IndexByte(s[first+1:], '/') < 0:
		n = TopicName{DefaultTenant, s[:first], s[first+1:]}
	default:
		rest := s[first+1:]
		second := strings.IndexByte(rest, '/')
		if strings.IndexByte(rest[second+1:], '/') >= 0 {
			return TopicName{}, fmt.Errorf("%w: %q has too many parts", ErrInvalidTopic, s)
		}
		n = TopicName{s[:first], rest[:second], rest[second+1:]}
	}
	for _, p := range [3]string{n.Tenant, n.Namespace, n.Topic} {
		if err := validNamePart(p); err != nil {
			return TopicName{}, fmt.Errorf("%w: %q: %v", ErrInvalidTopic, s, err)
		}
	}
	return n, nil
}

// validNamePart allows the characters Kafka and RocketMQ both accept in topic
// names: ASCII letters, digits, '.', '_', '-' and '%' (RocketMQ system topics).
func validNamePart(p string) error {
	if p == "" {
		return fmt.Errorf("empty name")
	}
	if len(p) > maxNameLen {
		return fmt.Errorf("longer than %d characters", maxNameLen)
	}
	if p == "." || p == ".." {
		return fmt.Errorf("%q is not allowed", p)
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '.', c == '_', c == '-', c == '%':
		default:
			return fmt.Errorf("character %q is not allowed", c)
		}
	}
	return nil
}

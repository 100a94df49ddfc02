package redrive

import (
	"errors"
	"fmt"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/payload"
)

// KeyFunc is the stored key of a dead letter's message: what the
// consumer that processed it claimed.
type KeyFunc func(m *broker.Message) (string, error)

// BodyKeys is the consumer's default key of a KeyFromBody source (SQS)
// under namespace: the IdempotencyKeyAttribute when present, else the
// body's hash.
func BodyKeys(namespace string) KeyFunc {
	return func(m *broker.Message) (string, error) {
		if k, ok := m.Attributes[broker.IdempotencyKeyAttribute]; ok {
			return dedup.Key(namespace, k)
		}
		key, _, err := dedup.BodyKey(namespace, m.Body)
		return key, err
	}
}

// RecordKeys is the consumer's default key of a KeyFromRecord source
// (Kafka) under namespace: broker.Fingerprint, of the topic the message
// was read from (its Origin.Destination), its record key and its value.
func RecordKeys(namespace string) KeyFunc {
	return func(m *broker.Message) (string, error) {
		fp, err := broker.Fingerprint(m)
		if err != nil {
			return "", err
		}
		if broker.FingerprintCoversBody(m) {
			return dedup.DerivedKey(namespace, fp)
		}
		return dedup.Key(namespace, fp)
	}
}

// ErrNoTenant: a letter carries no tenant where the run reads it (or one
// that cannot key a record), so its record cannot be found. Run leaves
// such a letter where it is (Untenanted): moved unchecked, its record
// would be neither reset nor seen COMPLETED.
var ErrNoTenant = errors.New("redrive: the letter names no tenant")

// TenantFunc is the tenant of a dead letter's message, read as the
// consumer's tenant function (consumer.WithTenantFunc) read it.
type TenantFunc func(m *broker.Message) (string, error)

// Tenant is a TenantFunc for a run whose letters all belong to tenant.
func Tenant(tenant string) TenantFunc {
	return func(*broker.Message) (string, error) { return tenant, nil }
}

// TenantAttribute reads the tenant from the message attribute (SQS) or
// header (Kafka) name; a letter without it is ErrNoTenant.
func TenantAttribute(name string) TenantFunc {
	return func(m *broker.Message) (string, error) {
		t, ok := m.Attributes[name]
		if !ok {
			return "", fmt.Errorf("%w: it carries no attribute or header %s", ErrNoTenant, name)
		}
		return t, nil
	}
}

// TenantJSONKey reads the tenant from the body as payload.JSONKey(path)
// does; a letter whose body is not JSON, or has no value there, is
// ErrNoTenant.
func TenantJSONKey(path string) TenantFunc {
	key := payload.JSONKey(path)
	return func(m *broker.Message) (string, error) {
		t, err := key(m)
		if err != nil {
			return "", fmt.Errorf("%w: %w", ErrNoTenant, err)
		}
		return t, nil
	}
}

// TenantKeys is the stored key of a tenant-keyed consumer's message: the
// key keys makes, behind the tenant tenant reads (dedup.TenantKey). A
// letter whose tenant cannot be read, or cannot key a record (empty, too
// long, not UTF-8), is ErrNoTenant, whatever keys makes of it.
func TenantKeys(keys KeyFunc, tenant TenantFunc) KeyFunc {
	return func(m *broker.Message) (string, error) {
		t, err := tenant(m)
		if err != nil {
			return "", err
		}
		if _, err := dedup.EscapeTenant(t); err != nil {
			return "", fmt.Errorf("%w: %w", ErrNoTenant, err)
		}
		key, err := keys(m)
		if err != nil {
			return "", err
		}
		return dedup.TenantKey(t, key)
	}
}

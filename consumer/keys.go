package consumer

import (
	"fmt"

	"github.com/onceq/onceq/dedup"
)

// keys returns the stored key and payload hash of m, the key behind m's
// tenant when there is a tenant function.
func (g *Guard) keys(m *Message) (string, string, error) {
	key, hash, err := g.untenanted(m)
	if err != nil || g.cfg.tenantFunc == nil {
		return key, hash, err
	}
	tenant, err := g.cfg.tenantFunc(m)
	if err != nil {
		return "", "", fmt.Errorf("consumer: tenant function: %w", err)
	}
	key, err = dedup.TenantKey(tenant, key)
	return key, hash, err
}

// untenanted returns m's key without its tenant, and its payload hash.
func (g *Guard) untenanted(m *Message) (string, string, error) {
	raw, ok := "", false
	if g.cfg.keyFunc != nil {
		k, err := g.cfg.keyFunc(m)
		if err != nil {
			return "", "", fmt.Errorf("consumer: key function: %w", err)
		}
		if g.cfg.keyCoversBody != nil && g.cfg.keyCoversBody(m) {
			key, err := dedup.DerivedKey(g.cfg.namespace, k)
			return key, "", err // the key already hashes the body
		}
		raw, ok = k, true
	} else if k, found := m.Attributes[IdempotencyKeyAttribute]; found {
		raw, ok = k, true
	}
	if !ok {
		// The key is the body's hash: hash once.
		return dedup.BodyKey(g.cfg.namespace, m.Body)
	}
	key, err := dedup.Key(g.cfg.namespace, raw)
	if err != nil {
		return "", "", err
	}
	hash, err := g.cfg.payloadHash(m.Body)
	if err != nil {
		return "", "", fmt.Errorf("consumer: payload hash: %w", err)
	}
	return key, hash, nil
}

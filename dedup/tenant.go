package dedup

import (
	"errors"
	"strings"
	"unicode/utf8"
)

// ErrBadTenant: a message's tenant cannot key a record (empty, not UTF-8,
// or longer than MaxTenantLen). It is the message's fault.
var ErrBadTenant = errors.New("dedup: tenant must be non-empty UTF-8 of at most 256 bytes")

// MaxTenantLen bounds a tenant, before escaping.
const MaxTenantLen = 256

// TenantMark follows a tenant's first '#' in a stored key: no key
// without a tenant has it there (the key part of "<namespace>#<key part>"
// never starts with Escape and Separator, see Key), so a tenant's key and
// another namespace's key are never one stored key.
const TenantMark = string(Escape) + string(Separator)

// TenantKey puts tenant in front of key (from Key, DerivedKey or BodyKey):
// "<tenant>#!#<key>", with '%' and '#' in the tenant escaped as %25 and
// %23. The tenant ends at the first '#', and TenantMark after it tells a
// tenant's key from a key without one, so no two different (tenant,
// namespace, key) tuples, nor a tuple and a (namespace, key) pair, make
// one stored key. A store's tenant layout partitions records by that
// first part.
//
// Keys without a tenant are stored as they always were. A tenant's key
// was "<tenant>#<key>" in earlier releases (without TenantMark), which could
// be another namespace's key: a record written under that form is not
// found by the new one, so a message redelivered across the upgrade is
// processed again (see docs/upgrading.md).
func TenantKey(tenant, key string) (string, error) {
	if key == "" {
		return "", ErrEmptyKey
	}
	t, err := EscapeTenant(tenant)
	if err != nil {
		return "", err
	}
	return t + string(Separator) + TenantMark + key, nil
}

// EscapeTenant is the tenant as TenantKey writes it: what a tenant
// layout's partition key holds, and what a query for a tenant looks up.
func EscapeTenant(tenant string) (string, error) {
	if tenant == "" || len(tenant) > MaxTenantLen || !utf8.ValidString(tenant) {
		return "", ErrBadTenant
	}
	if !strings.ContainsAny(tenant, "%#") {
		return tenant, nil
	}
	return tenantEscaper.Replace(tenant), nil
}

var tenantEscaper = strings.NewReplacer("%", "%25", "#", "%23")

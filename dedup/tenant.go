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

// TenantKey puts tenant in front of key (from Key or BodyKey):
// "<tenant>#<key>", with '%' and '#' in the tenant escaped as %25 and %23,
// so the tenant ends at the first '#' and two different (tenant, key)
// pairs never make one key. A store's tenant layout partitions records by
// that first part.
func TenantKey(tenant, key string) (string, error) {
	if key == "" {
		return "", ErrEmptyKey
	}
	t, err := EscapeTenant(tenant)
	if err != nil {
		return "", err
	}
	return t + "#" + key, nil
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

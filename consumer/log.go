package consumer

import (
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
)

// Logs carry a hash of the idempotency key, never the key or the body:
// either may hold personal data.
func slogKey(key string) slog.Attr {
	if key == "" {
		return slog.String("key_hash", "")
	}
	sum := sha256.Sum256([]byte(key))
	return slog.String("key_hash", hex.EncodeToString(sum[:6]))
}

func slogID(m *Message) slog.Attr  { return slog.String("message_id", m.ID) }
func slogKind(o Outcome) slog.Attr { return slog.String("outcome", o.Kind.String()) }

func slogErr(err error) slog.Attr {
	if err == nil {
		return slog.Attr{}
	}
	return slog.String("error", err.Error())
}

func logLevel(k Kind) slog.Level {
	switch k {
	case DeadLettered, KeyReuse, LeaseLost:
		return slog.LevelWarn
	case Retrying:
		return slog.LevelInfo
	}
	return slog.LevelDebug
}

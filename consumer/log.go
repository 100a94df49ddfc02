package consumer

import (
	"log/slog"

	"github.com/onceq/onceq/dedup"
)

// Logs carry a hash of the idempotency key, never the key or the body:
// either may hold personal data.
func slogKey(key string) slog.Attr { return slog.String("key_hash", dedup.KeyHash(key)) }

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

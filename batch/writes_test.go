package batch_test

import (
	"reflect"
	"testing"

	"github.com/onceq/onceq/batch"
	"github.com/onceq/onceq/dedup"
)

// A batch handler's writes and a Commit's are typed, as a per-message
// handler's are: a value that is no Store's write does not compile.
func TestBatchWritesAreTyped(t *testing.T) {
	m, _ := reflect.TypeFor[batch.Handler]().MethodByName("HandleBatch")
	if got := m.Type.Out(0); got != reflect.TypeFor[[]dedup.Write]() {
		t.Fatalf("HandleBatch returns %v, want []dedup.Write", got)
	}
	f, _ := reflect.TypeFor[batch.Commit]().FieldByName("Writes")
	if f.Type != reflect.TypeFor[[]dedup.Write]() {
		t.Fatalf("Commit.Writes is %v, want []dedup.Write", f.Type)
	}
}

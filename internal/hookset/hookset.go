package hookset

import "fmt"

// Add appends h to *list when h implements T, and reports whether it did.
func Add[T any](list *[]T, h any) bool {
	x, ok := h.(T)
	if ok {
		*list = append(*list, x)
	}
	return ok
}

// Into returns a sorter for [Collect]: it appends a hook to *list when the
// hook implements T, and reports whether it did.
func Into[T any](list *[]T) func(h any) bool {
	return func(h any) bool { return Add(list, h) }
}

// Collect offers each of hs to every sorter (a hook may implement several
// interfaces) and refuses one that none takes: the error wraps invalid and
// says which hook.
func Collect[H any](pkg string, invalid error, hs []H, sorters ...func(h any) bool) error {
	for _, h := range hs {
		used := false
		for _, sort := range sorters {
			used = sort(h) || used
		}
		if !used {
			return fmt.Errorf("%w: %w", invalid, Unused(pkg, h))
		}
	}
	return nil
}

// Unused is the error for a hook that implements none of pkg's hook
// interfaces (or is nil).
func Unused(pkg string, h any) error {
	if h == nil {
		return fmt.Errorf("%s: a nil hook", pkg)
	}
	return fmt.Errorf("%s: hook %T implements none of the %s hook interfaces (a misspelt method?)", pkg, h, pkg)
}

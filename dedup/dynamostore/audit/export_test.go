package audit

// FinishedShards is how many shards the auditor remembers as read to
// their end.
func (a *Auditor) FinishedShards() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.done)
}

// ListShardsNow makes the next Poll list the stream's shards, as a
// minute's passing would.
func (a *Auditor) ListShardsNow() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.relist = true
}

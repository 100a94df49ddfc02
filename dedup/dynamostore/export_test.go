package dynamostore

// WithClockCheck undoes WithoutClockCheck, for the tests of the check: the
// tests' store helper turns it off, as their clocks are their own.
func WithClockCheck() Option { return optionFunc(func(c *config) { c.noClockCheck = false }) }

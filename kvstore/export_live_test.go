package kvstore

// SetTestHookOwned installs fn as the hook a worker runs while it holds
// the move lock between classifying its batch and using the owned keys;
// the returned func removes it.
func SetTestHookOwned(fn func(op Op)) func() {
	testHookOwned = fn
	return func() { testHookOwned = nil }
}

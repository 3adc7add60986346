//go:build !unix

package pyhook

// lockFile has no flock to take here: extraction relies on the atomic
// rename alone, and leftovers of crashed extractors stay (exclusive false).
func lockFile(string) (unlock func(), exclusive bool, err error) {
	return func() {}, false, nil
}

// Package web holds the pages, embedded: the storefront (index.html) and the
// control room (admin.html), served by the API on its own origin.
package web

import (
	"embed"
	"io/fs"
)

//go:embed static
var files embed.FS

// Files returns the pages and their assets, rooted at the static folder.
func Files() fs.FS {
	sub, err := fs.Sub(files, "static")
	if err != nil { // the folder is embedded above: cannot happen
		panic(err)
	}
	return sub
}

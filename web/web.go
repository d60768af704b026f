// Package web holds the pages people use: the storefront (index.html) and
// the control room (admin.html), plain HTML, CSS and JavaScript embedded in
// the binary. `seckill api` serves them on the API's own origin; they speak
// only the API's JSON routes, so they can do nothing the API does not allow.
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

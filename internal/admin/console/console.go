// Package console is the node's web console: a page and its script and
// styles, embedded in the binary and served at / by the admin listener.
// It is a client of the admin API v1 like the rosetta command, written in
// plain HTML, CSS and JavaScript with no framework and no build step — so
// nothing generated is committed, nothing is fetched at run time (no CDN,
// no external fonts: it works offline), and there is no toolchain to keep
// current.
package console

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var files embed.FS

// Handler serves the console: the page at /, its assets under /assets/.
func Handler() (page, assets http.Handler) {
	static, _ := fs.Sub(files, "static")
	fileServer := http.FileServerFS(static)
	secure := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'")
			w.Header().Set("X-Content-Type-Options", "nosniff")
			w.Header().Set("Referrer-Policy", "no-referrer")
			h.ServeHTTP(w, r)
		})
	}
	page = secure(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := fs.ReadFile(static, "index.html")
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = w.Write(b)
	}))
	assets = secure(http.StripPrefix("/assets/", fileServer))
	return page, assets
}

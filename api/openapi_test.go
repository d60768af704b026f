package api_test

import (
	"context"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/seckill/seckill/api"
	"github.com/seckill/seckill/config"
)

// openAPIFile is the HTTP API reference this package keeps true.
const openAPIFile = "../docs/openapi.yaml"

// pendingExt marks an operation documented before its route lands (another
// change is adding it): it must not be a route yet. When the route lands,
// the test asks for the mark to go.
const pendingExt = "x-seckill-pending"

var openAPI = sync.OnceValues(func() (*openapi3.T, error) {
	doc, err := openapi3.NewLoader().LoadFromFile(openAPIFile)
	if err != nil {
		return nil, err
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, err
	}
	return doc, nil
})

var openAPIRouter = sync.OnceValues(func() (routers.Router, error) {
	doc, err := openAPI()
	if err != nil {
		return nil, err
	}
	return gorillamux.NewRouter(doc)
})

var ginParam = regexp.MustCompile(`[:*](\w+)`)

// The document is valid OpenAPI 3, every route of the router is in it, and
// every operation in it is a route (or marked pending and not a route yet).
func TestOpenAPIMatchesRoutes(t *testing.T) {
	doc, err := openAPI()
	if err != nil {
		t.Fatalf("%s: %v", openAPIFile, err)
	}
	// With the development sign-in: its route exists only then.
	h := newUnitServer(t, func(_ *config.API, d *api.Deps) { d.DevSecret = testSecret })
	routes := map[string]bool{}
	for _, r := range h.srv.Engine().Routes() {
		routes[r.Method+" "+ginParam.ReplaceAllString(r.Path, "{$1}")] = true
	}
	documented := map[string]bool{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			key := method + " " + path
			documented[key] = true
			_, pending := op.Extensions[pendingExt]
			switch {
			case pending && routes[key]:
				t.Errorf("%s is a route now: remove %s from its operation in %s", key, pendingExt, openAPIFile)
			case !pending && !routes[key]:
				t.Errorf("%s is in %s but not a route of the API", key, openAPIFile)
			}
			if len(op.Responses.Map()) == 0 {
				t.Errorf("%s: no responses documented", key)
			}
		}
	}
	var missing []string
	for r := range routes {
		if !documented[r] {
			missing = append(missing, r)
		}
	}
	sort.Strings(missing)
	for _, r := range missing {
		t.Errorf("route %s is not in %s: document it (paths, parameters, every answer)", r, openAPIFile)
	}
}

// checkOpenAPI validates one answer of the API against the document: its
// route and status must be documented and its body must match the schema.
// Every request the tests make through harness.do passes here.
func checkOpenAPI(t testing.TB, req *http.Request, status int, header http.Header, body []byte) {
	t.Helper()
	router, err := openAPIRouter()
	if err != nil {
		t.Fatalf("%s: %v", openAPIFile, err)
	}
	route, params, err := router.FindRoute(req)
	if err != nil {
		if status == http.StatusNotFound || status == http.StatusMethodNotAllowed || strings.HasPrefix(req.URL.Path, "/test/") {
			return // the router's own answers to unknown routes and methods; routes tests add
		}
		t.Fatalf("%s %s answered %d but is not in %s: %v", req.Method, req.URL.Path, status, openAPIFile, err)
	}
	if _, pending := route.Operation.Extensions[pendingExt]; pending {
		return
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request: req, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
		},
		Status: status,
		Header: header,
		Options: &openapi3filter.Options{
			IncludeResponseStatus: true,
			// Only JSON bodies have schemas to check (an event stream's
			// events carry the Order schema, which the other answers check;
			// pages and assets are what they are).
			ExcludeResponseBody: !strings.Contains(header.Get("Content-Type"), "json"),
			MultiError:          true,
		},
	}
	in.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		t.Fatalf("%s %s answered %d, which %s does not allow: %v\nbody: %s", req.Method, req.URL.Path, status, openAPIFile, err, body)
	}
}

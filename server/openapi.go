package server

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"

	"go.yaml.in/yaml/v3"
)

// openAPIYAML is the OpenAPI document of every endpoint (openapi.yaml),
// served as JSON at GET /openapi.json. openapi_test.go checks it against
// the route table and validates real responses of every endpoint against
// it.
//
//go:embed openapi.yaml
var openAPIYAML []byte

const routeOpenAPI = "/openapi.json"

// OpenAPI returns the OpenAPI document of the API as JSON: every endpoint
// a Server may serve (the slot, job and outbound ones only when
// configured).
func OpenAPI() ([]byte, error) {
	var doc any
	if err := yaml.Unmarshal(openAPIYAML, &doc); err != nil {
		return nil, fmt.Errorf("server: openapi.yaml: %w", err)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("server: openapi.yaml: %w", err)
	}
	return append(b, '\n'), nil
}

func (s *Server) openAPI(w http.ResponseWriter, _ *http.Request) {
	writeBody(w, http.StatusOK, contentJSON, s.openapiDoc)
}

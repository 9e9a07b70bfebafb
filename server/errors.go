package server

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// apiError is an error a client sees: an HTTP status and OpenAI's error
// object, whose type names the class (llama-server's names) and whose code
// names the case.
type apiError struct {
	status int
	typ    string
	code   string
	msg    string
}

func (e *apiError) Error() string { return e.msg }

// invalid is a 400: the request cannot be served as written.
func invalid(format string, a ...any) *apiError {
	return &apiError{http.StatusBadRequest, "invalid_request_error", "invalid_request", fmt.Sprintf(format, a...)}
}

var (
	errUnauthorized = &apiError{http.StatusUnauthorized, "authentication_error", "invalid_api_key",
		"invalid API key: send it as Authorization: Bearer KEY"}
	errQueueFull = &apiError{http.StatusServiceUnavailable, "unavailable_error", "queue_full",
		"the server is busy: every slot and the queue are taken; retry later"}
	errShuttingDown = &apiError{http.StatusServiceUnavailable, "unavailable_error", "shutting_down",
		"the server is shutting down"}
	errNotFound = &apiError{http.StatusNotFound, "not_found_error", "not_found", "no such endpoint"}
)

func methodNotAllowed(allow string) *apiError {
	return &apiError{http.StatusMethodNotAllowed, "invalid_request_error", "method_not_allowed",
		"method not allowed: use " + allow}
}

// tooLong is the 400 for a prompt the context cannot hold, with OpenAI's code.
func tooLong(prompt, ctx int) *apiError {
	return &apiError{http.StatusBadRequest, "invalid_request_error", "context_length_exceeded",
		fmt.Sprintf("the prompt is %d tokens; the context holds %d (prompt and completion)", prompt, ctx)}
}

// internal is a 500 for what went wrong on the server's side.
func internal(err error) *apiError {
	return &apiError{http.StatusInternalServerError, "server_error", "internal_error", err.Error()}
}

type errorBody struct {
	Error errorObject `json:"error"`
}

type errorObject struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

func (e *apiError) body() errorBody {
	return errorBody{errorObject{Message: e.msg, Type: e.typ, Code: e.code}}
}

// writeError answers with e (any other error is a 500).
func writeError(w http.ResponseWriter, err error) {
	e, ok := err.(*apiError)
	if !ok {
		e = internal(err)
	}
	if e.status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="infer"`)
	}
	writeJSON(w, e.status, e.body())
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(internal(fmt.Errorf("encoding the response: %w", err)).body())
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

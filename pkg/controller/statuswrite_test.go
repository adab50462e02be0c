package controller

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	clientset "github.com/example/gamesession-controller/pkg/generated/clientset/versioned"
)

// The status write against a real REST client: the request is the typed
// client's (PUT of the status subresource, the field manager, the cached
// resourceVersion as precondition), the answer is not decoded, and an error
// answer still comes back as the API error it is.
func TestPutSessionStatusLeavesAnswerUnread(t *testing.T) {
	var answer struct {
		code int
		body string
	}
	var got struct {
		method, path, fieldManager string
		sent                       gamesv1.GameSession
	}
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.method, got.path, got.fieldManager = r.Method, r.URL.Path, r.URL.Query().Get("fieldManager")
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &got.sent); err != nil {
			t.Errorf("request body is not a GameSession: %v", err)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(answer.code)
		_, _ = io.WriteString(w, answer.body)
	}))
	defer server.Close()

	client, err := clientset.NewForConfig(&rest.Config{Host: server.URL})
	if err != nil {
		t.Fatal(err)
	}
	put := newPutSessionStatus(client)
	session := &gamesv1.GameSession{
		ObjectMeta: metav1.ObjectMeta{Namespace: "arena", Name: "s1", ResourceVersion: "42"},
		Status:     gamesv1.GameSessionStatus{ProfileHash: "abc"},
	}

	// An answer the typed client could not decode into a GameSession: a
	// success all the same, as nothing reads it.
	answer.code, answer.body = http.StatusOK, `{"kind":"GameSession","apiVersion":"games.example.com/v1","spec":"not an object"}`
	if err := put(context.Background(), session, metav1.UpdateOptions{FieldManager: Name}); err != nil {
		t.Fatalf("put: %v", err)
	}
	if got.method != http.MethodPut || got.path != "/apis/games.example.com/v1/namespaces/arena/gamesessions/s1/status" || got.fieldManager != Name {
		t.Errorf("request: %s %s fieldManager=%q", got.method, got.path, got.fieldManager)
	}
	if got.sent.ResourceVersion != "42" || got.sent.Status.ProfileHash != "abc" {
		t.Errorf("sent resourceVersion %q, profileHash %q: want the cached 42 and the new abc", got.sent.ResourceVersion, got.sent.Status.ProfileHash)
	}

	answer.code = http.StatusConflict
	answer.body = `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Conflict","code":409,"message":"the object has been modified"}`
	if err := put(context.Background(), session, metav1.UpdateOptions{FieldManager: Name}); !apierrors.IsConflict(err) {
		t.Errorf("a 409 answer: got %v, want a Conflict", err)
	}
}

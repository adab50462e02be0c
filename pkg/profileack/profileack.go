package profileack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

const (
	// Annotation is the pod annotation a game server acknowledges a
	// revision with: see [Value] for its values.
	Annotation = "games.example.com/profile-ack"
	// RevisionFile is the file of the mounted profile directory that holds
	// the name of the revision mounted.
	RevisionFile = ".revision"
	// MaxRevisionBytes is the longest revision name: the longest name of a
	// Kubernetes object, which a revision (a ConfigMap) is.
	MaxRevisionBytes = 253
	// MaxMessageBytes is the longest reason of a failure that [Value]
	// writes and [Parse] returns; longer ones are cut and end in "…".
	MaxMessageBytes = 1024
)

// failedWord follows a failure's revision, after one space, and precedes its
// reason. A revision has no space, so a value's first space ends it.
const failedWord = "failed:"

// fieldManager names the game server's write in the pod's managedFields.
const fieldManager = "profileack"

// Ack is one acknowledgment: the revision a game server applied, or failed
// to apply and why.
type Ack struct {
	// Revision is the name of the revision acknowledged.
	Revision string
	// Failed says the game server could not apply it.
	Failed bool
	// Message is the reason of a failure, one line, maybe empty.
	Message string
}

// Value is the annotation's value that acknowledges revision: the revision
// alone if applyErr is nil, else "<revision> failed: <reason>", the reason
// being applyErr's message on one line and cut to [MaxMessageBytes], or
// "<revision> failed:" if that is empty. revision must be valid, as
// [ReadRevision] returns it: Parse refuses the value of any other.
func Value(revision string, applyErr error) string {
	if applyErr == nil {
		return revision
	}
	message := oneLine(applyErr.Error())
	if message == "" {
		return revision + " " + failedWord
	}
	return revision + " " + failedWord + " " + message
}

// Parse reads an annotation's value as [Value] writes it. ok is false for
// any other value, such as an empty or invalid revision, a second space
// after it, text after it other than a failure, or a failure without its
// colon. It is lenient in one way only, for values written by hand: a
// failure's reason, which may follow the colon without a space, is made one
// line and cut to [MaxMessageBytes] as Value does, so that Message is never
// longer.
func Parse(value string) (ack Ack, ok bool) {
	revision, rest, hasRest := strings.Cut(value, " ")
	if !ValidRevision(revision) {
		return Ack{}, false
	}
	if !hasRest {
		return Ack{Revision: revision}, true
	}
	message, isFailure := strings.CutPrefix(rest, failedWord)
	if !isFailure {
		return Ack{}, false
	}
	return Ack{Revision: revision, Failed: true, Message: oneLine(message)}, true
}

// ValidRevision says whether revision can be acknowledged: not empty, at
// most [MaxRevisionBytes] bytes of UTF-8, without whitespace or control
// characters.
func ValidRevision(revision string) bool {
	if revision == "" || len(revision) > MaxRevisionBytes || !utf8.ValidString(revision) {
		return false
	}
	for _, r := range revision {
		if unicode.IsSpace(r) || !unicode.IsGraphic(r) {
			return false
		}
	}
	return true
}

// oneLine turns message into one line of at most MaxMessageBytes bytes:
// invalid UTF-8 becomes U+FFFD, each run of whitespace and control
// characters one space, and the ends are trimmed. Applied to its own result
// it changes nothing, so Parse(Value(r, err)) returns Value's message.
func oneLine(message string) string {
	var b strings.Builder
	space := false
	for _, r := range strings.ToValidUTF8(message, string(utf8.RuneError)) {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			space = true
			continue
		}
		if space && b.Len() > 0 {
			b.WriteByte(' ')
		}
		space = false
		b.WriteRune(r)
	}
	s := b.String()
	if len(s) <= MaxMessageBytes {
		return s
	}
	const ellipsis = "…"
	cut := MaxMessageBytes - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strings.TrimRight(s[:cut], " ") + ellipsis
}

// ReadRevision returns the revision mounted in dir, the profile directory:
// the content of its [RevisionFile], whitespace trimmed. It is an error if
// the file is missing, empty, or holds no valid revision.
func ReadRevision(dir string) (string, error) {
	data, err := os.ReadFile(filepath.Join(dir, RevisionFile))
	if err != nil {
		return "", fmt.Errorf("reading the profile's revision: %w", err)
	}
	revision := strings.TrimSpace(string(data))
	switch {
	case revision == "":
		return "", fmt.Errorf("%s: the revision file is empty", filepath.Join(dir, RevisionFile))
	case !ValidRevision(revision):
		return "", fmt.Errorf("%s holds %.64q, not a revision: one name of at most %d bytes, without whitespace or control characters",
			filepath.Join(dir, RevisionFile), revision, MaxRevisionBytes)
	}
	return revision, nil
}

// Acknowledge sets the annotation of pod namespace/pod to Value(revision,
// applyErr), with a JSON merge patch of that annotation alone: nothing else
// of the pod is sent, so it neither conflicts with other writers nor needs
// the pod's resourceVersion. A game server calls it with its own pod and a
// client of its own pod-bound token ([InClusterAck]); the
// gamesession-profile-ack admission policy refuses the write otherwise.
func Acknowledge(ctx context.Context, client kubernetes.Interface, namespace, pod, revision string, applyErr error) error {
	if !ValidRevision(revision) {
		return fmt.Errorf("acknowledging revision %.64q: not a valid revision", revision)
	}
	if namespace == "" || pod == "" {
		return errors.New("acknowledging a revision: the pod's namespace and name are required")
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{Annotation: Value(revision, applyErr)}},
	})
	if err != nil {
		return err
	}
	if _, err := client.CoreV1().Pods(namespace).Patch(ctx, pod, types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: fieldManager}); err != nil {
		return fmt.Errorf("acknowledging revision %s on pod %s/%s: %w", revision, namespace, pod, err)
	}
	return nil
}

package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/example/gamesession-controller/pkg/rollout"
)

// Pause pauses the rollout of a profile: it sets the annotation
// rollout.games.example.com/paused=true on the profile ConfigMap.
func Pause(ctx context.Context, c Clients, out io.Writer, namespace, profile string) error {
	cm, err := getProfile(ctx, c, namespace, profile)
	if err != nil {
		return err
	}
	if cm.Annotations[rollout.AnnotationPaused] == "true" {
		_, err := fmt.Fprintf(out, "profile %s is paused already\n", profile)
		return err
	}
	if err := patchPaused(ctx, c, namespace, profile, "true"); err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "profile %s paused\n", profile)
	return err
}

// Resume resumes the paused rollout of a profile: it removes the annotation
// rollout.games.example.com/paused from the profile ConfigMap.
func Resume(ctx context.Context, c Clients, out io.Writer, namespace, profile string) error {
	cm, err := getProfile(ctx, c, namespace, profile)
	if err != nil {
		return err
	}
	if _, ok := cm.Annotations[rollout.AnnotationPaused]; !ok {
		_, err := fmt.Fprintf(out, "profile %s is not paused\n", profile)
		return err
	}
	if err := patchPaused(ctx, c, namespace, profile, nil); err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "profile %s resumed\n", profile)
	return err
}

// patchPaused sets the paused annotation to value, or removes it for nil.
// A JSON merge patch touches that one annotation: no read-modify-write, so
// it cannot undo a concurrent edit of the profile's content.
func patchPaused(ctx context.Context, c Clients, namespace, profile string, value any) error {
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]any{rollout.AnnotationPaused: value}},
	})
	if err != nil {
		return err
	}
	_, err = c.Kube.CoreV1().ConfigMaps(namespace).Patch(ctx, profile, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("patching profile %s: %w", profile, err)
	}
	return nil
}

package testutil

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// GameServerSecret is the Secret GameServerTemplate's pods read their
// credentials from: an env var of the game server, and a volume of the
// metrics sidecar.
const GameServerSecret = "arena-credentials"

// RealisticGameSession is a session whose pod is what a game server runs
// with in production: GameServerTemplate, two replicas, on profile.
func RealisticGameSession(name, profile string) *gamesv1.GameSession {
	return &gamesv1.GameSession{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: gamesv1.GameSessionSpec{
			ProfileRef: profile,
			Replicas:   ptr.To[int32](2),
			Template:   GameServerTemplate(name),
		},
	}
}

// GameServerTemplate is a realistic game server pod of the session name: a
// game server with a readiness probe, a preStop drain and its grace period,
// 20 environment variables (one from a Secret), a UDP port; a metrics
// sidecar with a Secret volume; scheduling (anti-affinity, a spread, a
// toleration of kwok's nodes), and a restricted security context. The tests
// and the benchmark use it so that what they measure is what users run.
func GameServerTemplate(session string) *corev1.PodTemplateSpec {
	env := []corev1.EnvVar{
		{Name: "MATCH_TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: GameServerSecret}, Key: "token"}}},
		{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
	}
	for i := len(env); i < 20; i++ {
		env = append(env, corev1.EnvVar{Name: fmt.Sprintf("ARENA_SETTING_%02d", i), Value: fmt.Sprintf("value-%d", i)})
	}
	restricted := &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	return &corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{
			Labels:      map[string]string{"example.com/game": "arena"},
			Annotations: map[string]string{"prometheus.io/port": "9100"},
		},
		Spec: corev1.PodSpec{
			// Players get a minute to finish: the preStop hook drains them.
			TerminationGracePeriodSeconds: ptr.To[int64](60),
			Containers: []corev1.Container{{
				Name:  "game-server",
				Image: "registry.example.com/arena-server:1.4.2",
				Args:  []string{"--port=7777", "--profile=/etc/gamesession/profile"},
				Env:   env,
				Ports: []corev1.ContainerPort{
					{Name: "game", ContainerPort: 7777, Protocol: corev1.ProtocolUDP},
					{Name: "health", ContainerPort: 8080, Protocol: corev1.ProtocolTCP},
				},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")},
				},
				// Ready means "takes players": a profile rollout counts a
				// session as done, or failed, by it.
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("health")}},
					PeriodSeconds:    2,
					FailureThreshold: 3,
				},
				LivenessProbe: &corev1.Probe{
					ProbeHandler:        corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/live", Port: intstr.FromString("health")}},
					InitialDelaySeconds: 10,
				},
				Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
					Exec: &corev1.ExecAction{Command: []string{"/arena-server", "drain", "--timeout=50s"}},
				}},
				SecurityContext: restricted,
			}, {
				Name:  "metrics",
				Image: "registry.example.com/arena-metrics:2.0.1",
				Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9100, Protocol: corev1.ProtocolTCP}},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "credentials", MountPath: "/var/run/credentials", ReadOnly: true},
				},
				SecurityContext: restricted,
			}},
			Volumes: []corev1.Volume{{
				Name:         "credentials",
				VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: GameServerSecret}},
			}},
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				RunAsUser:      ptr.To[int64](1000),
				FSGroup:        ptr.To[int64](1000),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			// Two game servers of a session on one node lose the match to
			// one node failure.
			Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
				PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
					Weight: 100,
					PodAffinityTerm: corev1.PodAffinityTerm{
						LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/instance": session}},
						TopologyKey:   "kubernetes.io/hostname",
					},
				}},
			}},
			TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
				MaxSkew:           1,
				TopologyKey:       "kubernetes.io/hostname",
				WhenUnsatisfiable: corev1.ScheduleAnyway,
				LabelSelector:     &metav1.LabelSelector{MatchLabels: map[string]string{"example.com/game": "arena"}},
			}},
			Tolerations: []corev1.Toleration{{Key: "kwok.x-k8s.io/node", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		},
	}
}

package controller

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/example/gamesession-controller/internal/fuzzinput"
	"github.com/example/gamesession-controller/internal/testutil"
)

// bareTemplate is a template with nothing the server defaults set: one
// container with an image.
func bareTemplate() corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "game-server", Image: "registry.example.com/arena:1.0"}},
	}}
}

func firstContainer(s *corev1.PodSpec) *corev1.Container { return &s.Containers[0] }

func firstVolume(s *corev1.PodSpec) *corev1.VolumeSource { return &s.Volumes[0].VolumeSource }

func withVolume(source corev1.VolumeSource) func(*corev1.PodSpec) {
	return func(s *corev1.PodSpec) { s.Volumes = []corev1.Volume{{Name: "data", VolumeSource: source}} }
}

func asJSON(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%#v", v)
	}
	return string(data)
}

// TestDefaultPodTemplate shows each default: what the user wrote (on top of
// bareTemplate), the field looked at, and the value the server stores.
func TestDefaultPodTemplate(t *testing.T) {
	execProbe := func() *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
	}
	tests := []struct {
		name  string
		write func(*corev1.PodSpec)
		field func(*corev1.PodSpec) any
		want  any
	}{
		// The pod spec.
		{"restartPolicy", nil, func(s *corev1.PodSpec) any { return s.RestartPolicy }, corev1.RestartPolicyAlways},
		{"dnsPolicy", nil, func(s *corev1.PodSpec) any { return s.DNSPolicy }, corev1.DNSClusterFirst},
		{"schedulerName", nil, func(s *corev1.PodSpec) any { return s.SchedulerName }, "default-scheduler"},
		{"securityContext is empty, not nil", nil, func(s *corev1.PodSpec) any { return s.SecurityContext }, &corev1.PodSecurityContext{}},
		{"terminationGracePeriodSeconds", nil, func(s *corev1.PodSpec) any { return s.TerminationGracePeriodSeconds }, ptr.To[int64](30)},
		{"serviceAccountName copied to serviceAccount", func(s *corev1.PodSpec) { s.ServiceAccountName = "arena" },
			func(s *corev1.PodSpec) any { return s.DeprecatedServiceAccount }, "arena"},
		{"serviceAccount copied to serviceAccountName", func(s *corev1.PodSpec) { s.DeprecatedServiceAccount = "legacy" },
			func(s *corev1.PodSpec) any { return s.ServiceAccountName }, "legacy"},
		{"serviceAccountName wins over serviceAccount", func(s *corev1.PodSpec) { s.ServiceAccountName, s.DeprecatedServiceAccount = "arena", "legacy" },
			func(s *corev1.PodSpec) any { return s.DeprecatedServiceAccount }, "arena"},
		{"overhead rounded up to milli-units", func(s *corev1.PodSpec) {
			s.Overhead = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100u")}
		},
			func(s *corev1.PodSpec) any { return s.Overhead[corev1.ResourceCPU] }, resource.MustParse("1m")},
		{"pod-level limits rounded up", func(s *corev1.PodSpec) {
			s.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1.0001")}}
		}, func(s *corev1.PodSpec) any { return s.Resources.Limits[corev1.ResourceCPU] }, resource.MustParse("1001m")},

		// Defaults of a Pod, not of a template: the ReplicaSet controller's
		// pods get them, the Deployment does not.
		{"pod-level requests stay unset", func(s *corev1.PodSpec) {
			s.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")}}
		}, func(s *corev1.PodSpec) any { return s.Resources.Requests }, corev1.ResourceList(nil)},
		{"requests not copied from limits", func(s *corev1.PodSpec) {
			firstContainer(s).Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
		}, func(s *corev1.PodSpec) any { return firstContainer(s).Resources.Requests }, corev1.ResourceList(nil)},
		{"enableServiceLinks stays unset", nil, func(s *corev1.PodSpec) any { return s.EnableServiceLinks }, (*bool)(nil)},
		{"hostPort stays 0 under hostNetwork", func(s *corev1.PodSpec) {
			s.HostNetwork = true
			firstContainer(s).Ports = []corev1.ContainerPort{{ContainerPort: 7777}}
		}, func(s *corev1.PodSpec) any { return firstContainer(s).Ports[0].HostPort }, int32(0)},
		{"a negative grace period stays", func(s *corev1.PodSpec) { s.TerminationGracePeriodSeconds = ptr.To[int64](-1) },
			func(s *corev1.PodSpec) any { return s.TerminationGracePeriodSeconds }, ptr.To[int64](-1)},
		{"httpGet protocol stays unset (H2CContainerProbe is off)", func(s *corev1.PodSpec) {
			firstContainer(s).LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(80)}}}
		}, func(s *corev1.PodSpec) any { return firstContainer(s).LivenessProbe.HTTPGet.Protocol }, (*corev1.HTTPProtocol)(nil)},

		// Containers.
		{"imagePullPolicy", nil, func(s *corev1.PodSpec) any { return firstContainer(s).ImagePullPolicy }, corev1.PullIfNotPresent},
		{"imagePullPolicy of an untagged image", func(s *corev1.PodSpec) { firstContainer(s).Image = "busybox" },
			func(s *corev1.PodSpec) any { return firstContainer(s).ImagePullPolicy }, corev1.PullAlways},
		{"terminationMessagePath", nil, func(s *corev1.PodSpec) any { return firstContainer(s).TerminationMessagePath }, "/dev/termination-log"},
		{"terminationMessagePolicy", nil, func(s *corev1.PodSpec) any { return firstContainer(s).TerminationMessagePolicy }, corev1.TerminationMessageReadFile},
		{"port protocol is TCP", func(s *corev1.PodSpec) { firstContainer(s).Ports = []corev1.ContainerPort{{ContainerPort: 7777}} },
			func(s *corev1.PodSpec) any { return firstContainer(s).Ports[0].Protocol }, corev1.ProtocolTCP},
		{"env fieldRef apiVersion", func(s *corev1.PodSpec) {
			firstContainer(s).Env = []corev1.EnvVar{{Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}
		}, func(s *corev1.PodSpec) any { return firstContainer(s).Env[0].ValueFrom.FieldRef.APIVersion }, "v1"},
		{"env fileKeyRef optional", func(s *corev1.PodSpec) {
			firstContainer(s).Env = []corev1.EnvVar{{Name: "ID", ValueFrom: &corev1.EnvVarSource{FileKeyRef: &corev1.FileKeySelector{VolumeName: "data", Path: "env", Key: "ID"}}}}
		}, func(s *corev1.PodSpec) any { return firstContainer(s).Env[0].ValueFrom.FileKeyRef.Optional }, ptr.To(false)},
		{"requests rounded up to milli-units", func(s *corev1.PodSpec) {
			firstContainer(s).Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100u")}
		}, func(s *corev1.PodSpec) any { return firstContainer(s).Resources.Requests[corev1.ResourceCPU] }, resource.MustParse("1m")},
		{"limits rounded up to milli-units", func(s *corev1.PodSpec) {
			firstContainer(s).Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("0.0001")}
		}, func(s *corev1.PodSpec) any { return firstContainer(s).Resources.Limits[corev1.ResourceMemory] }, resource.MustParse("1m")},
		{"probe numbers", func(s *corev1.PodSpec) { firstContainer(s).ReadinessProbe = execProbe() },
			func(s *corev1.PodSpec) any { return firstContainer(s).ReadinessProbe },
			&corev1.Probe{ProbeHandler: execProbe().ProbeHandler, TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3}},
		{"probe httpGet path and scheme", func(s *corev1.PodSpec) {
			firstContainer(s).LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromString("http")}}}
		}, func(s *corev1.PodSpec) any { return firstContainer(s).LivenessProbe.HTTPGet },
			&corev1.HTTPGetAction{Path: "/", Port: intstr.FromString("http"), Scheme: corev1.URISchemeHTTP}},
		{"startup probe grpc service", func(s *corev1.PodSpec) {
			firstContainer(s).StartupProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 9090}}}
		}, func(s *corev1.PodSpec) any { return firstContainer(s).StartupProbe.GRPC.Service }, ptr.To("")},
		{"lifecycle httpGet, and no probe numbers there", func(s *corev1.PodSpec) {
			firstContainer(s).Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(80)}}}
		}, func(s *corev1.PodSpec) any { return firstContainer(s).Lifecycle },
			&corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(80), Scheme: corev1.URISchemeHTTP}}}},
		{"restartable sidecar", func(s *corev1.PodSpec) {
			s.InitContainers = []corev1.Container{{Name: "proxy", Image: "envoy:latest", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways), ReadinessProbe: execProbe()}}
		}, func(s *corev1.PodSpec) any {
			c := s.InitContainers[0]
			return []any{c.ImagePullPolicy, c.TerminationMessagePath, c.ReadinessProbe.PeriodSeconds}
		}, []any{corev1.PullAlways, "/dev/termination-log", int32(10)}},
		{"ephemeral container", func(s *corev1.PodSpec) {
			s.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox",
				Ports: []corev1.ContainerPort{{ContainerPort: 80}}}}}
		}, func(s *corev1.PodSpec) any {
			c := s.EphemeralContainers[0]
			return []any{c.ImagePullPolicy, c.TerminationMessagePolicy, c.Ports[0].Protocol}
		}, []any{corev1.PullAlways, corev1.TerminationMessageReadFile, corev1.ProtocolTCP}},

		// Volumes.
		{"a volume without a source is an emptyDir", withVolume(corev1.VolumeSource{}),
			func(s *corev1.PodSpec) any { return firstVolume(s) }, &corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{"emptyDir gets nothing", withVolume(corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}),
			func(s *corev1.PodSpec) any { return firstVolume(s) }, &corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
		{"hostPath type", withVolume(corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/log"}}),
			func(s *corev1.PodSpec) any { return firstVolume(s).HostPath.Type }, ptr.To(corev1.HostPathUnset)},
		{"secret mode", withVolume(corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s"}}),
			func(s *corev1.PodSpec) any { return firstVolume(s).Secret.DefaultMode }, ptr.To[int32](0o644)},
		{"configMap mode", withVolume(corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "c"}}}),
			func(s *corev1.PodSpec) any { return firstVolume(s).ConfigMap.DefaultMode }, ptr.To[int32](0o644)},
		{"downwardAPI mode and field apiVersion", withVolume(corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
			Items: []corev1.DownwardAPIVolumeFile{{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}}},
		}}), func(s *corev1.PodSpec) any {
			d := firstVolume(s).DownwardAPI
			return []any{d.DefaultMode, d.Items[0].FieldRef.APIVersion}
		}, []any{ptr.To[int32](0o644), "v1"}},
		{"projected mode, token lifetime, field apiVersion", withVolume(corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}},
		}}}), func(s *corev1.PodSpec) any {
			p := firstVolume(s).Projected
			return []any{p.DefaultMode, p.Sources[0].ServiceAccountToken.ExpirationSeconds, p.Sources[1].DownwardAPI.Items[0].FieldRef.APIVersion}
		}, []any{ptr.To[int32](0o644), ptr.To[int64](3600), "v1"}},
		{"image volume pull policy", withVolume(corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "registry.example.com/maps:latest"}}),
			func(s *corev1.PodSpec) any { return firstVolume(s).Image.PullPolicy }, corev1.PullAlways},
		{"ephemeral claim volumeMode and rounding", withVolume(corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
			VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: corev1.PersistentVolumeClaimSpec{
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1.0001")}},
			}},
		}}), func(s *corev1.PodSpec) any {
			claim := firstVolume(s).Ephemeral.VolumeClaimTemplate.Spec
			return []any{claim.VolumeMode, claim.Resources.Requests[corev1.ResourceStorage]}
		}, []any{ptr.To(corev1.PersistentVolumeFilesystem), resource.MustParse("1001m")}},
		{"iscsi interface", withVolume(corev1.VolumeSource{ISCSI: &corev1.ISCSIVolumeSource{TargetPortal: "10.0.0.1", IQN: "iqn.2001-04.com.example:a"}}),
			func(s *corev1.PodSpec) any { return firstVolume(s).ISCSI.ISCSIInterface }, "default"},
		{"rbd pool, user, keyring", withVolume(corev1.VolumeSource{RBD: &corev1.RBDVolumeSource{CephMonitors: []string{"10.0.0.1"}, RBDImage: "a"}}),
			func(s *corev1.PodSpec) any {
				r := firstVolume(s).RBD
				return []string{r.RBDPool, r.RadosUser, r.Keyring}
			},
			[]string{"rbd", "admin", "/etc/ceph/keyring"}},
		{"azureDisk", withVolume(corev1.VolumeSource{AzureDisk: &corev1.AzureDiskVolumeSource{DiskName: "a", DataDiskURI: "https://a"}}),
			func(s *corev1.PodSpec) any { return firstVolume(s).AzureDisk },
			&corev1.AzureDiskVolumeSource{DiskName: "a", DataDiskURI: "https://a", CachingMode: ptr.To(corev1.AzureDataDiskCachingReadWrite),
				FSType: ptr.To("ext4"), ReadOnly: ptr.To(false), Kind: ptr.To(corev1.AzureSharedBlobDisk)}},
		{"scaleIO", withVolume(corev1.VolumeSource{ScaleIO: &corev1.ScaleIOVolumeSource{Gateway: "g", System: "s"}}),
			func(s *corev1.PodSpec) any { v := firstVolume(s).ScaleIO; return []string{v.StorageMode, v.FSType} },
			[]string{"ThinProvisioned", "xfs"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			template := bareTemplate()
			if tc.write != nil {
				tc.write(&template.Spec)
			}
			defaultPodTemplate(&template)
			if got := tc.field(&template.Spec); !equality.Semantic.DeepEqual(got, tc.want) {
				t.Errorf("got %s, want %s", asJSON(got), asJSON(tc.want))
			}
		})
	}
}

func TestPullPolicyFor(t *testing.T) {
	digest := "@sha256:" + strings.Repeat("0123456789abcdef", 4)
	tests := []struct {
		image string
		want  corev1.PullPolicy
	}{
		{"registry.example.com/arena:1.0", corev1.PullIfNotPresent},
		{"registry.example.com/arena:latest", corev1.PullAlways},
		{"registry.example.com/arena", corev1.PullAlways},
		{"busybox", corev1.PullAlways},
		{"library/busybox:latest", corev1.PullAlways},
		{"localhost:5000/arena", corev1.PullAlways},
		{"[::1]:5000/arena:latest", corev1.PullAlways},
		// A digest pins the image: no tag, nothing to re-pull.
		{"registry.example.com/arena" + digest, corev1.PullIfNotPresent},
		// With both, the tag decides.
		{"registry.example.com/arena:latest" + digest, corev1.PullAlways},
		{"registry.example.com/arena:1.0" + digest, corev1.PullIfNotPresent},
		// Tags are case-sensitive.
		{"registry.example.com/arena:LATEST", corev1.PullIfNotPresent},
		// An upper-case registry is fine, an upper-case repository does not
		// parse, and what does not parse has no tag.
		{"Registry.Example.COM/arena", corev1.PullAlways},
		{"Registry.Example.COM/Arena", corev1.PullIfNotPresent},
		{"Arena", corev1.PullIfNotPresent},
		{strings.Repeat("ab", 32), corev1.PullIfNotPresent},
		{"registry.example.com/arena@sha256:abc", corev1.PullIfNotPresent},
		{"registry.example.com/arena@md5:" + strings.Repeat("0", 32), corev1.PullIfNotPresent},
		// docker.io's library/ counts towards the 255 characters of a path.
		{strings.Repeat("a", 247), corev1.PullAlways},
		{strings.Repeat("a", 248), corev1.PullIfNotPresent},
		{"", corev1.PullIfNotPresent},
		{"ゲーム/サーバー", corev1.PullIfNotPresent},
	}
	for _, tc := range tests {
		if got := pullPolicyFor(tc.image); got != tc.want {
			t.Errorf("pullPolicyFor(%q) = %s, want %s", tc.image, got, tc.want)
		}
	}
}

func TestDefaultDeploymentStrategy(t *testing.T) {
	quarter := ptr.To(intstr.FromString("25%"))
	tests := []struct {
		name      string
		set, want appsv1.DeploymentStrategy
	}{
		{"unset", appsv1.DeploymentStrategy{}, appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
			RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: quarter, MaxSurge: quarter}}},
		{"surge only", appsv1.DeploymentStrategy{RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: ptr.To(intstr.FromInt32(1))}},
			appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: quarter, MaxSurge: ptr.To(intstr.FromInt32(1))}}},
		{"no unavailable pods", appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
			RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: ptr.To(intstr.FromInt32(0))}},
			appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: ptr.To(intstr.FromInt32(0)), MaxSurge: quarter}}},
		{"Recreate gets nothing", appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := *tc.set.DeepCopy()
			defaultDeploymentStrategy(&got)
			if !equality.Semantic.DeepEqual(got, tc.want) {
				t.Errorf("got %s, want %s", asJSON(got), asJSON(tc.want))
			}
			again := *got.DeepCopy()
			defaultDeploymentStrategy(&again)
			if !equality.Semantic.DeepEqual(again, got) {
				t.Errorf("defaulting twice gives %s, once %s", asJSON(again), asJSON(got))
			}
		})
	}
}

// fullySetTemplate sets every field that has a default, to a value other
// than the default where there is one.
func fullySetTemplate() corev1.PodTemplateSpec {
	probe := func() *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:   corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080), Scheme: corev1.URISchemeHTTPS}},
			TimeoutSeconds: 5, PeriodSeconds: 20, SuccessThreshold: 1, FailureThreshold: 6,
		}
	}
	container := func(name string) corev1.Container {
		return corev1.Container{
			Name: name, Image: "registry.example.com/arena:latest", ImagePullPolicy: corev1.PullNever,
			TerminationMessagePath: "/tmp/log", TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			Ports: []corev1.ContainerPort{{ContainerPort: 7777, Protocol: corev1.ProtocolUDP}},
			Env: []corev1.EnvVar{
				{Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v2", FieldPath: "metadata.name"}}},
				{Name: "ID", ValueFrom: &corev1.EnvVarSource{FileKeyRef: &corev1.FileKeySelector{VolumeName: "scratch", Path: "env", Key: "ID", Optional: ptr.To(true)}}},
			},
			Resources: corev1.ResourceRequirements{
				Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")},
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")},
			},
			LivenessProbe:  probe(),
			ReadinessProbe: probe(),
			StartupProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 9090, Service: ptr.To("games.Arena")}},
				TimeoutSeconds: 2, PeriodSeconds: 3, SuccessThreshold: 1, FailureThreshold: 4},
			Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/drain", Port: intstr.FromInt32(8080), Scheme: corev1.URISchemeHTTPS}}},
		}
	}
	mode := ptr.To[int32](0o400)
	volumes := []corev1.Volume{
		{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var", Type: ptr.To(corev1.HostPathDirectory)}}},
		{Name: "secret", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s", DefaultMode: mode}}},
		{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "c"}, DefaultMode: mode}}},
		{Name: "podinfo", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{DefaultMode: mode,
			Items: []corev1.DownwardAPIVolumeFile{{Path: "name", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v2", FieldPath: "metadata.name"}}}}}},
		{Name: "projected", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{DefaultMode: mode, Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](600)}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "uid", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v2", FieldPath: "metadata.uid"}}}}},
		}}}},
		{Name: "maps", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "maps:latest", PullPolicy: corev1.PullIfNotPresent}}},
		{Name: "claim", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{
			Spec: corev1.PersistentVolumeClaimSpec{VolumeMode: ptr.To(corev1.PersistentVolumeBlock)},
		}}}},
		{Name: "iscsi", VolumeSource: corev1.VolumeSource{ISCSI: &corev1.ISCSIVolumeSource{ISCSIInterface: "tcp"}}},
		{Name: "rbd", VolumeSource: corev1.VolumeSource{RBD: &corev1.RBDVolumeSource{RBDPool: "p", RadosUser: "u", Keyring: "/k"}}},
		{Name: "azure", VolumeSource: corev1.VolumeSource{AzureDisk: &corev1.AzureDiskVolumeSource{CachingMode: ptr.To(corev1.AzureDataDiskCachingNone),
			FSType: ptr.To("xfs"), ReadOnly: ptr.To(true), Kind: ptr.To(corev1.AzureManagedDisk)}}},
		{Name: "scaleio", VolumeSource: corev1.VolumeSource{ScaleIO: &corev1.ScaleIOVolumeSource{StorageMode: "ThickProvisioned", FSType: "ext4"}}},
	}
	sidecar := container("proxy")
	sidecar.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
	debug := container("debug")
	return corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyAlways, DNSPolicy: corev1.DNSDefault, SchedulerName: "games-scheduler",
		SecurityContext:               &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true)},
		TerminationGracePeriodSeconds: ptr.To[int64](5),
		ServiceAccountName:            "arena", DeprecatedServiceAccount: "arena",
		Overhead:            corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("120Mi")},
		Resources:           &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8")}},
		Volumes:             volumes,
		InitContainers:      []corev1.Container{sidecar},
		Containers:          []corev1.Container{container("game-server")},
		EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon(debug)}},
	}}
}

func TestDefaultPodTemplateKeepsWhatIsSet(t *testing.T) {
	set := fullySetTemplate()
	got := *set.DeepCopy()
	defaultPodTemplate(&got)
	if !equality.Semantic.DeepEqual(got, set) {
		t.Errorf("defaulting changed a template with everything set:\n%s", leafChanges(set, got))
	}
	strategy := appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
		MaxUnavailable: ptr.To(intstr.FromInt32(0)), MaxSurge: ptr.To(intstr.FromString("100%")),
	}}
	gotStrategy := *strategy.DeepCopy()
	defaultDeploymentStrategy(&gotStrategy)
	if !equality.Semantic.DeepEqual(gotStrategy, strategy) {
		t.Errorf("defaulting changed a strategy with everything set: %s, was %s", asJSON(gotStrategy), asJSON(strategy))
	}
}

// TestDefaultPodTemplateRandom checks, on random templates, that defaulting
// once is enough (a second pass changes nothing, or the controller would
// see a difference in a template it defaulted itself) and that it only adds:
// every value the template had is still there, save the two the server
// rewrites, a quantity finer than a milli-unit and the serviceAccount alias.
func TestDefaultPodTemplateRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	for i := range 1000 {
		written := fuzzinput.RandomPodTemplate(r)
		once := *written.DeepCopy()
		defaultPodTemplate(&once)
		twice := *once.DeepCopy()
		defaultPodTemplate(&twice)
		if !equality.Semantic.DeepEqual(twice, once) {
			t.Fatalf("template %d: defaulting twice differs from once:\n%s", i, leafChanges(once, twice))
		}
		before, after := testutil.JSONLeaves(written, false), testutil.JSONLeaves(once, false)
		for path, was := range before {
			now, ok := after[path]
			// null is how grpc.service, which has no omitempty, is unset.
			if was == "null" || ok && now == was || roundedUp(was, now) || path == "spec.serviceAccount" && now == after["spec.serviceAccountName"] {
				continue
			}
			t.Fatalf("template %d: defaulting changed %s from %s to %s", i, path, was, now)
		}
	}
}

// roundedUp reports whether two JSON values are quantities, the second the
// first rounded up to a milli-unit.
func roundedUp(was, now string) bool {
	w, errW := strconv.Unquote(was)
	n, errN := strconv.Unquote(now)
	if errW != nil || errN != nil {
		return false
	}
	qw, errW := resource.ParseQuantity(w)
	qn, errN := resource.ParseQuantity(n)
	if errW != nil || errN != nil {
		return false
	}
	qw.RoundUp(resource.Milli)
	return qw.Cmp(qn) == 0
}

// leafChanges lists the JSON leaves that differ between a and b.
func leafChanges(a, b any) string {
	la, lb := testutil.JSONLeaves(a, false), testutil.JSONLeaves(b, false)
	var out strings.Builder
	for path, v := range la {
		if lb[path] != v {
			fmt.Fprintf(&out, "  %s: %s -> %s\n", path, v, lb[path])
		}
	}
	for path, v := range lb {
		if _, ok := la[path]; !ok {
			fmt.Fprintf(&out, "  %s: (unset) -> %s\n", path, v)
		}
	}
	return out.String()
}

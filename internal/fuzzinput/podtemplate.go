package fuzzinput

import (
	"fmt"
	"math/rand/v2"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// RandomPodTemplate returns a random pod template of the kind people write
// into a Deployment, to check the controller's copy of the API server's
// defaulting (pkg/controller/poddefaults.go) against the real one. Every
// field that has a default is sometimes left out and sometimes set, and
// objects that get defaults inside (probes, volumes, env) are often filled
// in only partly.
//
// Deployment validation accepts the templates: containers named uniquely
// (one of them game-server), ports with distinct numbers, probes with one
// handler each, mounts of volumes that exist. The volume name "profile" and
// the mount path /etc/gamesession/profile, which the controller reserves,
// never occur, and neither do the controller's labels.
func RandomPodTemplate(r *rand.Rand) corev1.PodTemplateSpec {
	d := &templateDraw{r: r, nextPort: int32(1024 + r.IntN(30000))}
	spec := corev1.PodSpec{HostNetwork: d.oneIn(6)}
	if d.oneIn(3) {
		spec.TerminationGracePeriodSeconds = ptr.To(int64(pick(r, 0, 5, 30, 120)))
	}
	// A sleep hook must end within the grace period (30s by default).
	d.grace = ptr.Deref(spec.TerminationGracePeriodSeconds, 30)
	spec.Volumes = d.volumes()

	names := slices.Clone(containerNames)
	r.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	regular := 1 + r.IntN(3)
	for i := range regular {
		name := gameServerName
		if i > 0 {
			name, names = names[0], names[1:]
		}
		spec.Containers = append(spec.Containers, d.container(name, containerRegular, spec.HostNetwork))
	}
	// The game server is not always the first container.
	r.Shuffle(len(spec.Containers), func(i, j int) { spec.Containers[i], spec.Containers[j] = spec.Containers[j], spec.Containers[i] })
	if d.oneIn(3) {
		for range 1 + r.IntN(2) {
			var name string
			name, names = names[0], names[1:]
			kind := containerInit
			if d.oneIn(2) {
				kind = containerSidecar
			}
			spec.InitContainers = append(spec.InitContainers, d.container(name, kind, spec.HostNetwork))
		}
	}

	d.podFields(&spec)
	return corev1.PodTemplateSpec{ObjectMeta: d.templateMeta(), Spec: spec}
}

// gameServerName is the container the controller owns. Volumes here are
// named after their kind and mounted under /mnt, so none can be the
// controller's "profile" volume or its mount.
const gameServerName = "game-server"

// containerNames are the names of the other containers: every template
// takes a few of them, distinct, for its sidecars and init containers.
var containerNames = []string{"log-shipper", "metrics", "envoy", "agent", "init-config", "wait-for-db", "migrate", "proxy"}

type containerKind int

const (
	containerRegular containerKind = iota
	containerInit                  // runs to completion before the others: no probes, no lifecycle
	containerSidecar               // an init container with restartPolicy Always
)

// templateDraw draws one template, remembering what its parts must agree
// on: the port numbers taken, the volumes containers can mount.
type templateDraw struct {
	r          *rand.Rand
	nextPort   int32
	grace      int64 // the pod's termination grace period, in seconds
	podVolumes []corev1.Volume
}

func (d *templateDraw) oneIn(n int) bool { return d.r.IntN(n) == 0 }

// port returns a port number no other port of the template has, so that no
// two containers claim the same port (a warning) or host port (an error).
func (d *templateDraw) port() int32 {
	d.nextPort += 1 + int32(d.r.IntN(50))
	return d.nextPort
}

func (d *templateDraw) templateMeta() metav1.ObjectMeta {
	meta := metav1.ObjectMeta{Labels: map[string]string{}}
	for _, key := range []string{"tier", "team", "games.example.com/mode"} {
		if d.oneIn(2) {
			meta.Labels[key] = pick(d.r, "backend", "arena", "ranked", "casual", "eu-1")
		}
	}
	if d.oneIn(3) {
		meta.Annotations = map[string]string{"prometheus.io/scrape": "true"}
		if d.oneIn(2) {
			meta.Annotations["games.example.com/build"] = fmt.Sprint(d.r.IntN(10000))
		}
	}
	return meta
}

// image returns images whose pull policy defaults differently: tags,
// latest, no tag at all, digests with and without a tag, registries with
// ports, and references the image parser refuses (upper case, a bare
// 64-digit hex string), which have no tag and so do not default to Always.
func (d *templateDraw) image() string {
	digest := "@sha256:" + randomString(d.r, "0123456789abcdef", 64)
	return pick(d.r,
		"registry.example.com/games/arena:1.4.2",
		"registry.example.com/games/arena:latest",
		"registry.example.com/games/arena",
		"registry.example.com/games/arena"+digest,
		"registry.example.com/games/arena:latest"+digest,
		"registry.example.com:5000/games/arena",
		"localhost:5000/arena:latest",
		"busybox",
		"busybox:latest",
		"busybox:1.36",
		"nginx:LATEST",
		"Registry.Example.COM/Games/Arena",
		randomString(d.r, "0123456789abcdef", 64),
		fmt.Sprintf("ghcr.io/example/agent:v%d.%d", d.r.IntN(3), d.r.IntN(20)),
	)
}

func (d *templateDraw) container(name string, kind containerKind, hostNetwork bool) corev1.Container {
	c := corev1.Container{Name: name, Image: d.image()}
	if kind == containerSidecar {
		c.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
	}
	if d.oneIn(4) {
		c.ImagePullPolicy = pick(d.r, corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever)
	}
	if d.oneIn(3) {
		c.Command = []string{"/bin/" + name}
	}
	if d.oneIn(2) {
		c.Args = []string{"--log-level=" + pick(d.r, "info", "debug"), fmt.Sprintf("--workers=%d", 1+d.r.IntN(8))}
	}
	if d.oneIn(4) {
		c.TerminationMessagePath = "/tmp/termination-log"
	}
	if d.oneIn(4) {
		c.TerminationMessagePolicy = pick(d.r, corev1.TerminationMessageReadFile, corev1.TerminationMessageFallbackToLogsOnError)
	}
	c.Ports = d.ports(hostNetwork)
	c.Env = d.env()
	if d.oneIn(3) {
		c.EnvFrom = d.envFrom()
	}
	c.Resources = d.resources()
	c.VolumeMounts = d.mounts()
	if d.oneIn(3) {
		c.SecurityContext = d.containerSecurityContext()
	}
	if d.oneIn(8) {
		c.WorkingDir = "/srv"
	}
	if kind == containerInit {
		return c
	}
	if d.oneIn(2) {
		c.LivenessProbe = d.probe(c.Ports, false)
	}
	if d.oneIn(2) {
		c.ReadinessProbe = d.probe(c.Ports, true)
	}
	if d.oneIn(3) {
		c.StartupProbe = d.probe(c.Ports, false)
	}
	if d.oneIn(3) {
		c.Lifecycle = &corev1.Lifecycle{}
		if d.oneIn(2) {
			c.Lifecycle.PostStart = d.lifecycleHandler(c.Ports)
		}
		if c.Lifecycle.PostStart == nil || d.oneIn(2) {
			c.Lifecycle.PreStop = d.lifecycleHandler(c.Ports)
		}
	}
	return c
}

// ports returns up to three ports, named or not, with any protocol or none.
// Under hostNetwork a host port is either unset or the container port (the
// only values validation lets through); otherwise it is sometimes a port of
// its own.
func (d *templateDraw) ports(hostNetwork bool) []corev1.ContainerPort {
	var ports []corev1.ContainerPort
	for range d.r.IntN(4) {
		p := corev1.ContainerPort{ContainerPort: d.port()}
		if !d.oneIn(3) {
			// Numbered by the port, which no other port has: a name twice
			// in a pod is only a warning, but a noisy one.
			p.Name = fmt.Sprintf("%s%d", pick(d.r, "game", "query", "http", "metrics", "grpc"), p.ContainerPort)
		}
		p.Protocol = pick(d.r, "", "", corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP)
		switch {
		case hostNetwork && d.oneIn(2):
			p.HostPort = p.ContainerPort
		case !hostNetwork && d.oneIn(5):
			p.HostPort = d.port()
		}
		ports = append(ports, p)
	}
	return ports
}

// portRef names one of the ports, or gives a number: probes and handlers
// take either.
func (d *templateDraw) portRef(ports []corev1.ContainerPort) intstr.IntOrString {
	if len(ports) > 0 && d.oneIn(2) {
		p := ports[d.r.IntN(len(ports))]
		if p.Name != "" && d.oneIn(2) {
			return intstr.FromString(p.Name)
		}
		return intstr.FromInt32(p.ContainerPort)
	}
	return intstr.FromInt32(int32(1 + d.r.IntN(65535)))
}

func (d *templateDraw) httpGet(ports []corev1.ContainerPort) *corev1.HTTPGetAction {
	h := &corev1.HTTPGetAction{Port: d.portRef(ports)}
	if d.oneIn(2) {
		h.Path = pick(d.r, "/healthz", "/ready", "/")
	}
	if d.oneIn(2) {
		h.Scheme = pick(d.r, corev1.URISchemeHTTP, corev1.URISchemeHTTPS)
	}
	if d.oneIn(4) {
		h.Host = "127.0.0.1"
	}
	if d.oneIn(4) {
		h.HTTPHeaders = []corev1.HTTPHeader{{Name: "X-Probe", Value: "kubelet"}}
	}
	return h
}

// probe returns a probe with one handler of any kind and some of its
// numbers set. Liveness and startup probes must succeed once (success
// threshold 1); only readiness probes may ask for more, and only they may
// not set a grace period.
func (d *templateDraw) probe(ports []corev1.ContainerPort, readiness bool) *corev1.Probe {
	p := &corev1.Probe{}
	switch d.r.IntN(4) {
	case 0:
		p.HTTPGet = d.httpGet(ports)
	case 1:
		p.TCPSocket = &corev1.TCPSocketAction{Port: d.portRef(ports)}
	case 2:
		p.Exec = &corev1.ExecAction{Command: []string{"/bin/healthcheck", pick(d.r, "--quick", "--full")}}
	case 3:
		p.GRPC = &corev1.GRPCAction{Port: int32(1 + d.r.IntN(65535))}
		if d.oneIn(2) {
			p.GRPC.Service = ptr.To(pick(d.r, "", "games.Arena"))
		}
	}
	if d.oneIn(3) {
		p.InitialDelaySeconds = int32(d.r.IntN(30))
	}
	if d.oneIn(3) {
		p.TimeoutSeconds = int32(1 + d.r.IntN(10))
	}
	if d.oneIn(3) {
		p.PeriodSeconds = int32(1 + d.r.IntN(60))
	}
	if d.oneIn(3) {
		p.SuccessThreshold = 1
		if readiness {
			p.SuccessThreshold = int32(1 + d.r.IntN(5))
		}
	}
	if d.oneIn(3) {
		p.FailureThreshold = int32(1 + d.r.IntN(10))
	}
	if !readiness && d.oneIn(6) {
		p.TerminationGracePeriodSeconds = ptr.To(int64(1 + d.r.IntN(60)))
	}
	return p
}

func (d *templateDraw) lifecycleHandler(ports []corev1.ContainerPort) *corev1.LifecycleHandler {
	switch d.r.IntN(3) {
	case 0:
		return &corev1.LifecycleHandler{HTTPGet: d.httpGet(ports)}
	case 1:
		if d.grace > 1 {
			return &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 1 + d.r.Int64N(min(10, d.grace-1))}}
		}
	}
	return &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/bin/drain", "--timeout=30s"}}}
}

// Field paths the downward API gives env and volumes.
var (
	envFieldPaths    = []string{"metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName", "spec.serviceAccountName", "status.hostIP", "status.podIP", "status.podIPs", "metadata.labels['tier']"}
	volumeFieldPaths = []string{"metadata.name", "metadata.namespace", "metadata.uid", "metadata.labels", "metadata.annotations"}
	resourceFields   = []struct{ resource, divisor string }{
		{"limits.cpu", "1m"}, {"requests.cpu", "1"}, {"limits.memory", "1Mi"}, {"requests.memory", "1"}, {"limits.ephemeral-storage", "1Gi"},
	}
)

// fieldSelector leaves the API version out half the time: it defaults.
func (d *templateDraw) fieldSelector(paths []string) *corev1.ObjectFieldSelector {
	f := &corev1.ObjectFieldSelector{FieldPath: pick(d.r, paths...)}
	if d.oneIn(2) {
		f.APIVersion = "v1"
	}
	return f
}

func (d *templateDraw) resourceFieldSelector(container string) *corev1.ResourceFieldSelector {
	field := resourceFields[d.r.IntN(len(resourceFields))]
	s := &corev1.ResourceFieldSelector{ContainerName: container, Resource: field.resource}
	if d.oneIn(2) {
		s.Divisor = resource.MustParse(field.divisor)
	}
	return s
}

func (d *templateDraw) env() []corev1.EnvVar {
	var env []corev1.EnvVar
	for i := range d.r.IntN(6) {
		v := corev1.EnvVar{Name: fmt.Sprintf("VAR_%d", i)}
		switch d.r.IntN(6) {
		case 0:
			v.Value = pick(d.r, "", "eu-west", "42")
		case 1:
			v.ValueFrom = &corev1.EnvVarSource{FieldRef: d.fieldSelector(envFieldPaths)}
		case 2:
			v.ValueFrom = &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "arena-secrets"}, Key: "token", Optional: d.optional(),
			}}
		case 3:
			v.ValueFrom = &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "arena-settings"}, Key: "region", Optional: d.optional(),
			}}
		case 4:
			// An env var's resource may name no container: its own.
			v.ValueFrom = &corev1.EnvVarSource{ResourceFieldRef: d.resourceFieldSelector("")}
		case 5:
			// fileKeyRef (EnvFiles, beta in 1.37) reads an emptyDir.
			if dir := d.emptyDir(); dir != "" {
				v.ValueFrom = &corev1.EnvVarSource{FileKeyRef: &corev1.FileKeySelector{
					VolumeName: dir, Path: "env/vars", Key: "MATCH_ID", Optional: d.optional(),
				}}
			} else {
				v.Value = "no-file"
			}
		}
		env = append(env, v)
	}
	return env
}

func (d *templateDraw) optional() *bool {
	if d.oneIn(2) {
		return nil
	}
	return ptr.To(d.oneIn(2))
}

func (d *templateDraw) envFrom() []corev1.EnvFromSource {
	from := []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "arena-env"}}}}
	if d.oneIn(2) {
		from = append(from, corev1.EnvFromSource{Prefix: "SECRET_", SecretRef: &corev1.SecretEnvSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "arena-secrets"}, Optional: d.optional(),
		}})
	}
	return from
}

// quantities per resource, smallest first, some of them finer than a
// milli-unit (100u, 1.0005), which the server rounds up. A slice, not a
// map: the draw must not depend on map order, or a seed would not replay.
var quantities = []struct {
	name   corev1.ResourceName
	values []string
}{
	{corev1.ResourceCPU, []string{"100u", "10m", "100m", "0.25", "500m", "1", "1.0005", "2"}},
	{corev1.ResourceMemory, []string{"64Mi", "128Mi", "200M", "256Mi", "1Gi", "1.5Gi"}},
	{corev1.ResourceEphemeralStorage, []string{"100Mi", "1Gi", "2Gi"}},
}

// resources returns requests only, limits only, both (each request at most
// its limit) or neither.
func (d *templateDraw) resources() corev1.ResourceRequirements {
	var req corev1.ResourceRequirements
	mode := d.r.IntN(4) // 0 none, 1 requests, 2 limits, 3 both
	if mode == 0 {
		return req
	}
	for _, q := range quantities {
		name, values := q.name, q.values
		if d.oneIn(2) {
			continue
		}
		lo := d.r.IntN(len(values))
		hi := lo + d.r.IntN(len(values)-lo)
		if mode&1 != 0 {
			if req.Requests == nil {
				req.Requests = corev1.ResourceList{}
			}
			req.Requests[name] = resource.MustParse(values[lo])
		}
		if mode&2 != 0 {
			if req.Limits == nil {
				req.Limits = corev1.ResourceList{}
			}
			req.Limits[name] = resource.MustParse(values[hi])
		}
	}
	return req
}

func (d *templateDraw) containerSecurityContext() *corev1.SecurityContext {
	s := &corev1.SecurityContext{}
	if d.oneIn(2) {
		s.AllowPrivilegeEscalation = ptr.To(false)
	}
	if d.oneIn(2) {
		s.ReadOnlyRootFilesystem = ptr.To(d.oneIn(2))
	}
	if d.oneIn(2) {
		s.RunAsNonRoot = ptr.To(true)
		s.RunAsUser = ptr.To(int64(1000 + d.r.IntN(1000)))
	}
	if d.oneIn(2) {
		s.Capabilities = &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}
		if d.oneIn(2) {
			s.Capabilities.Add = []corev1.Capability{"NET_BIND_SERVICE"}
		}
	}
	if d.oneIn(3) {
		s.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	}
	return s
}

// volumes draws the pod's volumes, up to six of the kinds people use, and
// now and then one of a rarer kind: an image, an ephemeral claim, one with
// no source at all (which is an emptyDir).
func (d *templateDraw) volumes() []corev1.Volume {
	d.podVolumes = nil
	for i := range d.r.IntN(7) {
		kind := d.r.IntN(len(volumeKinds))
		v := corev1.Volume{Name: fmt.Sprintf("%s-%d", volumeKinds[kind], i)}
		switch kind {
		case 0:
			v.Secret = &corev1.SecretVolumeSource{SecretName: "arena-secrets", Optional: d.optional()}
			if d.oneIn(2) {
				v.Secret.DefaultMode = ptr.To[int32](0o400)
			}
			if d.oneIn(3) {
				v.Secret.Items = []corev1.KeyToPath{{Key: "token", Path: "token"}}
			}
		case 1:
			v.ConfigMap = &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "arena-settings"}}
			if d.oneIn(2) {
				v.ConfigMap.DefaultMode = ptr.To[int32](0o755)
			}
			if d.oneIn(3) {
				v.ConfigMap.Items = []corev1.KeyToPath{{Key: "server.cfg", Path: "server.cfg", Mode: ptr.To[int32](0o600)}}
			}
		case 2:
			v.EmptyDir = &corev1.EmptyDirVolumeSource{}
			if d.oneIn(3) {
				v.EmptyDir.Medium = corev1.StorageMediumMemory
			}
			if d.oneIn(3) {
				v.EmptyDir.SizeLimit = ptr.To(resource.MustParse(pick(d.r, "64Mi", "1Gi", "0.5")))
			}
		case 3:
			v.DownwardAPI = &corev1.DownwardAPIVolumeSource{Items: d.downwardAPIFiles("")}
			if d.oneIn(2) {
				v.DownwardAPI.DefaultMode = ptr.To[int32](0o444)
			}
		case 4:
			v.Projected = d.projected()
		case 5:
			v.HostPath = &corev1.HostPathVolumeSource{Path: "/var/log/games"}
			if d.oneIn(2) {
				v.HostPath.Type = ptr.To(pick(d.r, corev1.HostPathUnset, corev1.HostPathDirectoryOrCreate, corev1.HostPathDirectory))
			}
		case 6:
			v.Image = &corev1.ImageVolumeSource{Reference: d.image()}
			if d.oneIn(3) {
				v.Image.PullPolicy = pick(d.r, corev1.PullAlways, corev1.PullIfNotPresent)
			}
		case 7:
			claim := corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceStorage: resource.MustParse(pick(d.r, "1Gi", "10G", "1.0001")),
				}},
			}
			if d.oneIn(3) {
				claim.VolumeMode = ptr.To(pick(d.r, corev1.PersistentVolumeFilesystem, corev1.PersistentVolumeBlock))
			}
			if d.oneIn(2) {
				claim.StorageClassName = ptr.To("fast")
			}
			v.Ephemeral = &corev1.EphemeralVolumeSource{VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: claim}}
		case 8:
			// No source: the server makes it an emptyDir.
		case 9:
			d.legacyVolume(&v.VolumeSource)
		}
		d.podVolumes = append(d.podVolumes, v)
	}
	return d.podVolumes
}

var volumeKinds = []string{"secret", "config", "scratch", "podinfo", "projected", "host", "image", "claim", "plain", "legacy"}

// legacyVolume sets one of the in-tree volume plugins whose fields have
// declarative defaults, with those fields sometimes set.
func (d *templateDraw) legacyVolume(source *corev1.VolumeSource) {
	switch d.r.IntN(4) {
	case 0:
		source.ISCSI = &corev1.ISCSIVolumeSource{TargetPortal: "10.0.0.1:3260", IQN: "iqn.2001-04.com.example:storage", Lun: 0}
		if d.oneIn(2) {
			source.ISCSI.ISCSIInterface = "tcp"
		}
	case 1:
		source.RBD = &corev1.RBDVolumeSource{CephMonitors: []string{"10.0.0.1:6789"}, RBDImage: "arena"}
		if d.oneIn(2) {
			source.RBD.RBDPool, source.RBD.RadosUser = "games", "arena"
		}
	case 2:
		source.AzureDisk = &corev1.AzureDiskVolumeSource{DiskName: "arena", DataDiskURI: "https://example.blob.core.windows.net/vhds/arena.vhd"}
		if d.oneIn(2) {
			source.AzureDisk.CachingMode = ptr.To(corev1.AzureDataDiskCachingReadOnly)
			source.AzureDisk.ReadOnly = ptr.To(true)
		}
	case 3:
		source.ScaleIO = &corev1.ScaleIOVolumeSource{Gateway: "https://scaleio.example.com", System: "games",
			SecretRef: &corev1.LocalObjectReference{Name: "scaleio"}, VolumeName: "arena"}
		if d.oneIn(2) {
			source.ScaleIO.FSType = "ext4"
		}
	}
}

// downwardAPIFiles returns one to three files, each a field or a resource.
// A volume's resource must name its container; a projection's name prefix
// keeps its paths apart from its other sources'.
func (d *templateDraw) downwardAPIFiles(prefix string) []corev1.DownwardAPIVolumeFile {
	var files []corev1.DownwardAPIVolumeFile
	for i := range 1 + d.r.IntN(3) {
		f := corev1.DownwardAPIVolumeFile{Path: fmt.Sprintf("%sfile-%d", prefix, i)}
		if d.oneIn(3) {
			f.ResourceFieldRef = d.resourceFieldSelector(gameServerName)
		} else {
			f.FieldRef = d.fieldSelector(volumeFieldPaths)
		}
		if d.oneIn(4) {
			f.Mode = ptr.To[int32](0o440)
		}
		files = append(files, f)
	}
	return files
}

// projected returns a projection of a service account token, often with
// others beside it, each source under paths of its own.
func (d *templateDraw) projected() *corev1.ProjectedVolumeSource {
	token := &corev1.ServiceAccountTokenProjection{Path: "token"}
	if d.oneIn(2) {
		token.ExpirationSeconds = ptr.To(int64(pick(d.r, 600, 3600, 7200, 86400)))
	}
	if d.oneIn(3) {
		token.Audience = "games.example.com"
	}
	p := &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{ServiceAccountToken: token}}}
	if d.oneIn(2) {
		p.Sources = append(p.Sources, corev1.VolumeProjection{ConfigMap: &corev1.ConfigMapProjection{
			LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
			Items:                []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}},
		}})
	}
	if d.oneIn(2) {
		p.Sources = append(p.Sources, corev1.VolumeProjection{DownwardAPI: &corev1.DownwardAPIProjection{Items: d.downwardAPIFiles("podinfo-")}})
	}
	if d.oneIn(3) {
		p.Sources = append(p.Sources, corev1.VolumeProjection{Secret: &corev1.SecretProjection{
			LocalObjectReference: corev1.LocalObjectReference{Name: "arena-secrets"},
			Items:                []corev1.KeyToPath{{Key: "tls.crt", Path: "tls/tls.crt"}},
		}})
	}
	if d.oneIn(2) {
		p.DefaultMode = ptr.To[int32](0o440)
	}
	return p
}

// emptyDir returns the name of an explicit emptyDir volume, "" if none.
func (d *templateDraw) emptyDir() string {
	for _, v := range d.podVolumes {
		if v.EmptyDir != nil {
			return v.Name
		}
	}
	return ""
}

// mounts mounts some of the volumes, each at a path of its own; an image
// volume is read-only whatever the mount says, so it says so.
func (d *templateDraw) mounts() []corev1.VolumeMount {
	var mounts []corev1.VolumeMount
	for _, v := range d.podVolumes {
		// A block device is not mounted but attached (volumeDevices).
		if d.oneIn(2) || isBlockClaim(v) {
			continue
		}
		m := corev1.VolumeMount{Name: v.Name, MountPath: "/mnt/" + v.Name}
		if v.Image != nil || d.oneIn(3) {
			m.ReadOnly = true
		}
		if v.EmptyDir != nil && d.oneIn(4) {
			m.SubPath = "cache"
		}
		mounts = append(mounts, m)
	}
	return mounts
}

func isBlockClaim(v corev1.Volume) bool {
	e := v.Ephemeral
	return e != nil && e.VolumeClaimTemplate != nil && ptr.Deref(e.VolumeClaimTemplate.Spec.VolumeMode, "") == corev1.PersistentVolumeBlock
}

// podFields sets the pod-level fields, each now and then.
func (d *templateDraw) podFields(spec *corev1.PodSpec) {
	r := d.r
	if d.oneIn(6) {
		spec.RestartPolicy = corev1.RestartPolicyAlways
	}
	if d.oneIn(5) {
		spec.DNSPolicy = pick(r, corev1.DNSClusterFirst, corev1.DNSClusterFirstWithHostNet, corev1.DNSDefault, corev1.DNSNone)
		if spec.DNSPolicy == corev1.DNSNone || d.oneIn(3) {
			spec.DNSConfig = &corev1.PodDNSConfig{
				Nameservers: []string{"10.0.0.10"},
				Searches:    []string{"games.svc.cluster.local"},
				Options:     []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("2")}},
			}
		}
	}
	if d.oneIn(6) {
		spec.SchedulerName = "games-scheduler"
	}
	if d.oneIn(5) {
		spec.EnableServiceLinks = ptr.To(d.oneIn(2))
	}
	if d.oneIn(4) {
		spec.AutomountServiceAccountToken = ptr.To(d.oneIn(2))
	}
	switch r.IntN(8) {
	case 0, 1:
		spec.ServiceAccountName = "arena"
	case 2:
		// The deprecated alias alone: the server copies it over.
		spec.DeprecatedServiceAccount = "arena-legacy"
	case 3:
		spec.ServiceAccountName, spec.DeprecatedServiceAccount = "arena", "arena"
	}
	if d.oneIn(4) {
		spec.PriorityClassName = pick(r, "game-critical", "low")
	}
	if d.oneIn(4) {
		spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "registry-credentials"}}
	}
	if d.oneIn(3) {
		spec.NodeSelector = map[string]string{"kubernetes.io/os": "linux"}
		if d.oneIn(2) {
			spec.NodeSelector["node.example.com/pool"] = "games"
		}
	}
	if d.oneIn(3) {
		spec.Tolerations = d.tolerations()
	}
	if d.oneIn(3) {
		spec.Affinity = d.affinity()
	}
	if d.oneIn(4) {
		spec.TopologySpreadConstraints = d.topologySpread()
	}
	if d.oneIn(3) {
		spec.SecurityContext = d.podSecurityContext()
	}
	if d.oneIn(10) {
		spec.Hostname = "arena"
		spec.Subdomain = "games"
	}
	if d.oneIn(10) {
		// What a RuntimeClass would add; the server only rounds it.
		spec.Overhead = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(pick(r, "250m", "100u")), corev1.ResourceMemory: resource.MustParse("120Mi")}
	}
	if d.oneIn(6) {
		// Pod-level resources (PodLevelResources, beta in 1.37), far above
		// what the containers ask for, as validation wants.
		spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse(pick(r, "64", "100.00001")),
			corev1.ResourceMemory: resource.MustParse("512Gi"),
		}}
		if d.oneIn(2) {
			spec.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("32.0000001")}
		}
	}
}

func (d *templateDraw) tolerations() []corev1.Toleration {
	all := []corev1.Toleration{
		{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "games", Effect: corev1.TaintEffectNoSchedule},
		// No operator means Equal, and it stays unset.
		{Key: "dedicated", Value: "games", Effect: corev1.TaintEffectPreferNoSchedule},
		{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](30)},
		{Operator: corev1.TolerationOpExists},
	}
	d.r.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	return all[:1+d.r.IntN(len(all))]
}

func (d *templateDraw) affinity() *corev1.Affinity {
	a := &corev1.Affinity{}
	if d.oneIn(2) {
		a.NodeAffinity = &corev1.NodeAffinity{}
		if d.oneIn(2) {
			a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/arch", Operator: corev1.NodeSelectorOpIn, Values: []string{"amd64", "arm64"}}},
			}}}
		}
		if d.oneIn(2) {
			a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution = []corev1.PreferredSchedulingTerm{{
				Weight: int32(1 + d.r.IntN(100)),
				Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
					{Key: "node.example.com/pool", Operator: corev1.NodeSelectorOpExists},
				}},
			}}
		}
	}
	if a.NodeAffinity == nil || d.oneIn(2) {
		term := corev1.PodAffinityTerm{
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "arena"}},
			TopologyKey:   pick(d.r, "kubernetes.io/hostname", "topology.kubernetes.io/zone"),
		}
		a.PodAntiAffinity = &corev1.PodAntiAffinity{}
		if d.oneIn(2) {
			a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution = []corev1.PodAffinityTerm{term}
		} else {
			a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution = []corev1.WeightedPodAffinityTerm{{Weight: int32(1 + d.r.IntN(100)), PodAffinityTerm: term}}
		}
	}
	return a
}

func (d *templateDraw) topologySpread() []corev1.TopologySpreadConstraint {
	c := corev1.TopologySpreadConstraint{
		MaxSkew:           int32(1 + d.r.IntN(3)),
		TopologyKey:       pick(d.r, "kubernetes.io/hostname", "topology.kubernetes.io/zone"),
		WhenUnsatisfiable: pick(d.r, corev1.DoNotSchedule, corev1.ScheduleAnyway),
		LabelSelector:     &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "arena"}},
	}
	if c.WhenUnsatisfiable == corev1.DoNotSchedule && d.oneIn(3) {
		c.MinDomains = ptr.To(int32(1 + d.r.IntN(3)))
	}
	if d.oneIn(3) {
		c.NodeAffinityPolicy = ptr.To(pick(d.r, corev1.NodeInclusionPolicyHonor, corev1.NodeInclusionPolicyIgnore))
	}
	if d.oneIn(3) {
		c.NodeTaintsPolicy = ptr.To(pick(d.r, corev1.NodeInclusionPolicyHonor, corev1.NodeInclusionPolicyIgnore))
	}
	if d.oneIn(4) {
		// The pods of one ReplicaSet spread by themselves.
		c.MatchLabelKeys = []string{"pod-template-hash"}
	}
	return []corev1.TopologySpreadConstraint{c}
}

func (d *templateDraw) podSecurityContext() *corev1.PodSecurityContext {
	s := &corev1.PodSecurityContext{}
	if d.oneIn(2) {
		s.RunAsUser = ptr.To(int64(1000 + d.r.IntN(1000)))
		s.RunAsGroup = ptr.To(int64(1000 + d.r.IntN(1000)))
	}
	if d.oneIn(2) {
		s.RunAsNonRoot = ptr.To(true)
	}
	if d.oneIn(2) {
		s.FSGroup = ptr.To[int64](2000)
		if d.oneIn(2) {
			s.FSGroupChangePolicy = ptr.To(corev1.FSGroupChangeOnRootMismatch)
		}
	}
	if d.oneIn(3) {
		s.SupplementalGroups = []int64{3000}
	}
	if d.oneIn(3) {
		s.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	}
	return s
}

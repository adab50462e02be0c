package controller

import (
	"regexp"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// The API server defaults a Deployment before it validates and stores it
// (k8s.io/kubernetes pkg/apis/apps/v1 and pkg/apis/core/v1: defaults.go, and
// the generated walkers in zz_generated.defaults.go, which also carry the
// declarative +default= values). The functions below do the same to the
// controller's desired objects, so that a desired template equals the one
// the informer hands back and a sync of a Deployment in order writes
// nothing. TestPodTemplateDefaultsMatchAPIServer (test/integration) checks
// them against a real kube-apiserver; when Kubernetes is upgraded, rerun it.
//
// Several defaults people expect are NOT applied to a pod template, only to
// a Pod when the ReplicaSet controller creates it (SetDefaults_Pod): requests
// copied from limits, pod-level requests, hostPort copied from containerPort
// under hostNetwork, enableServiceLinks, and a negative grace period turned
// into 1. Copying them here would make every stored Deployment look stale.

// defaultPodTemplate sets, in place, every value kube-apiserver fills in when it stores a Deployment's pod template (apps/v1, Kubernetes 1.37, default feature gates), so that a desired template compares equal to the stored one.
func defaultPodTemplate(t *corev1.PodTemplateSpec) {
	defaultPodSpec(&t.Spec)
}

// defaultDeploymentStrategy does the same for a Deployment's strategy.
func defaultDeploymentStrategy(s *appsv1.DeploymentStrategy) {
	if s.Type == "" {
		s.Type = appsv1.RollingUpdateDeploymentStrategyType
	}
	// A Recreate strategy keeps what it has: rollingUpdate there is refused
	// by validation, not cleared.
	if s.Type != appsv1.RollingUpdateDeploymentStrategyType {
		return
	}
	if s.RollingUpdate == nil {
		s.RollingUpdate = &appsv1.RollingUpdateDeployment{}
	}
	if s.RollingUpdate.MaxUnavailable == nil {
		s.RollingUpdate.MaxUnavailable = ptr.To(intstr.FromString("25%"))
	}
	if s.RollingUpdate.MaxSurge == nil {
		s.RollingUpdate.MaxSurge = ptr.To(intstr.FromString("25%"))
	}
}

func defaultPodSpec(spec *corev1.PodSpec) {
	// serviceAccount is the old name of serviceAccountName; the server keeps
	// both, the new one winning when they disagree.
	if spec.ServiceAccountName == "" {
		spec.ServiceAccountName = spec.DeprecatedServiceAccount
	}
	spec.DeprecatedServiceAccount = spec.ServiceAccountName
	if spec.DNSPolicy == "" {
		spec.DNSPolicy = corev1.DNSClusterFirst
	}
	if spec.RestartPolicy == "" {
		spec.RestartPolicy = corev1.RestartPolicyAlways
	}
	// An empty one, not nil: the server has always stored {}.
	if spec.SecurityContext == nil {
		spec.SecurityContext = &corev1.PodSecurityContext{}
	}
	if spec.TerminationGracePeriodSeconds == nil {
		spec.TerminationGracePeriodSeconds = ptr.To[int64](corev1.DefaultTerminationGracePeriodSeconds)
	}
	if spec.SchedulerName == "" {
		spec.SchedulerName = corev1.DefaultSchedulerName
	}
	for i := range spec.Volumes {
		defaultVolume(&spec.Volumes[i])
	}
	for i := range spec.InitContainers {
		// Restartable sidecars are init containers too: same defaults.
		defaultContainer(&spec.InitContainers[i])
	}
	for i := range spec.Containers {
		defaultContainer(&spec.Containers[i])
	}
	for i := range spec.EphemeralContainers {
		// Validation refuses them in a template, but the defaulting runs first.
		defaultContainer((*corev1.Container)(&spec.EphemeralContainers[i].EphemeralContainerCommon))
	}
	roundUpToMilli(spec.Overhead)
	if spec.Resources != nil {
		// Pod-level resources (PodLevelResources, beta and on in 1.37) are
		// only rounded. Their requests are filled in on the Pod, not here.
		roundUpToMilli(spec.Resources.Limits)
		roundUpToMilli(spec.Resources.Requests)
	}
}

func defaultContainer(c *corev1.Container) {
	if c.ImagePullPolicy == "" {
		c.ImagePullPolicy = pullPolicyFor(c.Image)
	}
	if c.TerminationMessagePath == "" {
		c.TerminationMessagePath = corev1.TerminationMessagePathDefault
	}
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
	}
	for i := range c.Ports {
		if c.Ports[i].Protocol == "" {
			c.Ports[i].Protocol = corev1.ProtocolTCP
		}
	}
	for i := range c.Env {
		from := c.Env[i].ValueFrom
		if from == nil {
			continue
		}
		defaultFieldSelector(from.FieldRef)
		// fileKeyRef (EnvFiles, beta and on in 1.37).
		if from.FileKeyRef != nil && from.FileKeyRef.Optional == nil {
			from.FileKeyRef.Optional = ptr.To(false)
		}
	}
	// Only rounded: requests are copied from limits on the Pod, not here.
	roundUpToMilli(c.Resources.Limits)
	roundUpToMilli(c.Resources.Requests)
	for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
		defaultProbe(p)
	}
	if c.Lifecycle != nil {
		// A lifecycle handler is not a probe: no timeouts, only its httpGet.
		for _, h := range []*corev1.LifecycleHandler{c.Lifecycle.PostStart, c.Lifecycle.PreStop} {
			if h != nil {
				defaultHTTPGet(h.HTTPGet)
			}
		}
	}
}

func defaultProbe(p *corev1.Probe) {
	if p == nil {
		return
	}
	if p.TimeoutSeconds == 0 {
		p.TimeoutSeconds = 1
	}
	if p.PeriodSeconds == 0 {
		p.PeriodSeconds = 10
	}
	if p.SuccessThreshold == 0 {
		p.SuccessThreshold = 1
	}
	if p.FailureThreshold == 0 {
		p.FailureThreshold = 3
	}
	defaultHTTPGet(p.HTTPGet)
	if p.GRPC != nil && p.GRPC.Service == nil {
		// The empty service asks for the server's overall health.
		p.GRPC.Service = ptr.To("")
	}
}

func defaultHTTPGet(h *corev1.HTTPGetAction) {
	if h == nil {
		return
	}
	if h.Path == "" {
		h.Path = "/"
	}
	if h.Scheme == "" {
		h.Scheme = corev1.URISchemeHTTP
	}
	// h.Protocol is left alone: its default belongs to H2CContainerProbe,
	// alpha and off in 1.37, and is applied to Pods only.
}

func defaultFieldSelector(f *corev1.ObjectFieldSelector) {
	if f != nil && f.APIVersion == "" {
		f.APIVersion = "v1"
	}
}

func defaultVolume(v *corev1.Volume) {
	// A volume that names no source is an emptyDir.
	if ptr.AllPtrFieldsNil(&v.VolumeSource) {
		v.VolumeSource = corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
	}
	source := &v.VolumeSource
	if s := source.HostPath; s != nil && s.Type == nil {
		s.Type = ptr.To(corev1.HostPathUnset)
	}
	if s := source.Secret; s != nil && s.DefaultMode == nil {
		s.DefaultMode = ptr.To(corev1.SecretVolumeSourceDefaultMode)
	}
	if s := source.ConfigMap; s != nil && s.DefaultMode == nil {
		s.DefaultMode = ptr.To(corev1.ConfigMapVolumeSourceDefaultMode)
	}
	if s := source.DownwardAPI; s != nil {
		if s.DefaultMode == nil {
			s.DefaultMode = ptr.To(corev1.DownwardAPIVolumeSourceDefaultMode)
		}
		for i := range s.Items {
			defaultFieldSelector(s.Items[i].FieldRef)
		}
	}
	if s := source.Projected; s != nil {
		if s.DefaultMode == nil {
			s.DefaultMode = ptr.To(corev1.ProjectedVolumeSourceDefaultMode)
		}
		for i := range s.Sources {
			projection := &s.Sources[i]
			if projection.DownwardAPI != nil {
				for j := range projection.DownwardAPI.Items {
					defaultFieldSelector(projection.DownwardAPI.Items[j].FieldRef)
				}
			}
			if token := projection.ServiceAccountToken; token != nil && token.ExpirationSeconds == nil {
				token.ExpirationSeconds = ptr.To[int64](60 * 60)
			}
		}
	}
	if s := source.Image; s != nil && s.PullPolicy == "" {
		// ImageVolume is GA and locked on in 1.37.
		s.PullPolicy = pullPolicyFor(s.Reference)
	}
	if s := source.Ephemeral; s != nil && s.VolumeClaimTemplate != nil {
		claim := &s.VolumeClaimTemplate.Spec
		if claim.VolumeMode == nil {
			claim.VolumeMode = ptr.To(corev1.PersistentVolumeFilesystem)
		}
		roundUpToMilli(claim.Resources.Limits)
		roundUpToMilli(claim.Resources.Requests)
	}
	// The declarative defaults of the in-tree volume plugins.
	if s := source.ISCSI; s != nil && s.ISCSIInterface == "" {
		s.ISCSIInterface = "default"
	}
	if s := source.RBD; s != nil {
		if s.RBDPool == "" {
			s.RBDPool = "rbd"
		}
		if s.RadosUser == "" {
			s.RadosUser = "admin"
		}
		if s.Keyring == "" {
			s.Keyring = "/etc/ceph/keyring"
		}
	}
	if s := source.AzureDisk; s != nil {
		if s.CachingMode == nil {
			s.CachingMode = ptr.To(corev1.AzureDataDiskCachingReadWrite)
		}
		if s.FSType == nil {
			s.FSType = ptr.To("ext4")
		}
		if s.ReadOnly == nil {
			s.ReadOnly = ptr.To(false)
		}
		if s.Kind == nil {
			s.Kind = ptr.To(corev1.AzureSharedBlobDisk)
		}
	}
	if s := source.ScaleIO; s != nil {
		if s.StorageMode == "" {
			s.StorageMode = "ThinProvisioned"
		}
		if s.FSType == "" {
			s.FSType = "xfs"
		}
	}
}

// roundUpToMilli rounds every quantity up to a whole milli-unit, as the
// server does before it stores one: a request of 100u CPU is stored as 1m.
func roundUpToMilli(list corev1.ResourceList) {
	for name, q := range list {
		// A copy: a Quantity shares its decimal with the one it was copied from.
		q = q.DeepCopy()
		q.RoundUp(resource.Milli)
		list[name] = q
	}
}

// pullPolicyFor returns the pull policy the server gives an image that has
// none: Always for the tag latest, which an untagged image means, else
// IfNotPresent. An image pinned by digest alone has no tag, so IfNotPresent;
// one with both a tag and a digest goes by its tag.
//
// The server reads the tag with github.com/distribution/reference, and an
// image that library does not parse (an upper-case repository, an unknown
// digest algorithm, a 64-digit hex string) has no tag at all: IfNotPresent,
// even untagged. imageTag follows the same grammar.
func pullPolicyFor(image string) corev1.PullPolicy {
	if tag, ok := imageTag(image); ok && tag == "latest" {
		return corev1.PullAlways
	}
	return corev1.PullIfNotPresent
}

// The grammar of an image reference: [domain[:port]/]path[:tag][@digest].
var (
	imageIdentifier = regexp.MustCompile(`^[a-f0-9]{64}$`)
	imageReference  = regexp.MustCompile(`^(` + imageName + `)(?::(` + imageTagPattern + `))?(?:@(` + imageDigestPattern + `))?$`)
	imageNameParts  = regexp.MustCompile(`^(?:(` + imageDomain + `)/)?(` + imagePath + `)$`)
	digestEncodings = map[string]*regexp.Regexp{
		"sha256": regexp.MustCompile(`^[a-f0-9]{64}$`),
		"sha384": regexp.MustCompile(`^[a-f0-9]{96}$`),
		"sha512": regexp.MustCompile(`^[a-f0-9]{128}$`),
	}
)

const (
	// Path components are lower case, joined by '.', '_', "__" or dashes.
	imagePathComponent = `[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*`
	imagePath          = imagePathComponent + `(?:/` + imagePathComponent + `)*`
	// Domain labels may be upper case; an IPv6 address goes in brackets.
	imageDomainLabel   = `(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])`
	imageDomain        = `(?:` + imageDomainLabel + `(?:\.` + imageDomainLabel + `)*|\[(?:[a-fA-F0-9:]+)\])(?::[0-9]+)?`
	imageName          = `(?:` + imageDomain + `/)?` + imagePath
	imageTagPattern    = `[\w][\w.-]{0,127}`
	imageDigestPattern = `[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*[:][[:xdigit:]]{32,}`
	// The longest path a repository may have, after docker.io's library/
	// is put in front of a short name.
	maxImagePathLength = 255
)

// imageTag returns the tag the image is pulled by ("latest" when it has
// neither tag nor digest, "" when it has only a digest), and false when the
// reference does not parse.
func imageTag(image string) (string, bool) {
	if imageIdentifier.MatchString(image) {
		return "", false
	}
	domain, remainder := splitImageDomain(image)
	repository, _, _ := strings.Cut(remainder, ":")
	if strings.ToLower(repository) != repository {
		return "", false
	}
	m := imageReference.FindStringSubmatch(domain + "/" + remainder)
	if m == nil {
		return "", false
	}
	name, tag, digest := m[1], m[2], m[3]
	if parts := imageNameParts.FindStringSubmatch(name); parts == nil || len(parts[2]) > maxImagePathLength {
		return "", false
	}
	if digest != "" {
		algorithm, encoded, _ := strings.Cut(digest, ":")
		if encoding, known := digestEncodings[algorithm]; !known || !encoding.MatchString(encoded) {
			return "", false
		}
	}
	if tag == "" && digest == "" {
		return "latest", true
	}
	return tag, true
}

// splitImageDomain splits off the registry the way docker does: the first
// path element is a registry if it is localhost, has a dot or a colon, or
// has upper case; otherwise the image is on docker.io, where a one-element
// name is short for library/name.
func splitImageDomain(image string) (domain, remainder string) {
	const dockerHub = "docker.io"
	first, rest, found := strings.Cut(image, "/")
	switch {
	case !found:
		return dockerHub, "library/" + image
	case first == "localhost":
		domain, remainder = first, rest
	case first == "index.docker.io":
		domain, remainder = dockerHub, rest
	case strings.ContainsAny(first, ".:"), strings.ToLower(first) != first:
		domain, remainder = first, rest
	default:
		domain, remainder = dockerHub, image
	}
	if domain == dockerHub && !strings.Contains(remainder, "/") {
		remainder = "library/" + remainder
	}
	return domain, remainder
}

// DefaultPodTemplate is defaultPodTemplate, exported so that the
// integration test can check it against a real API server.
func DefaultPodTemplate(t *corev1.PodTemplateSpec) { defaultPodTemplate(t) }

// DefaultDeploymentStrategy is defaultDeploymentStrategy, exported for the
// same test.
func DefaultDeploymentStrategy(s *appsv1.DeploymentStrategy) { defaultDeploymentStrategy(s) }

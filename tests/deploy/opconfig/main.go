// opconfig: the Prometheus configuration the Prometheus Operator generates
// for the ServiceMonitors and PodMonitors of a YAML stream (the chart as
// `helm template` renders it), made by the operator's own code as its
// reconcile loop runs it (pkg/prometheus/server/operator.go): a
// ResourceSelector selects and validates the monitors (a rejected monitor is
// an error here, where the operator would only skip it and record an event),
// then ConfigGenerator.GenerateServerConfiguration writes prometheus.yaml.
//
// The Prometheus object is in the monitors' namespace (-namespace) and
// selects every ServiceMonitor and PodMonitor there. The operator's
// Prometheus runs in the cluster (in-cluster API server access, no
// api_server in kubernetes_sd_configs); -api-server, -ca-file and
// -token-file set the Prometheus object's spec.apiserverConfig, the
// operator's own setting for a Prometheus outside the cluster. Secrets in
// the stream are the store the monitors' secret references read.
//
//	opconfig -namespace slowpath [-prometheus-version v3.16.0] [-endpointslice]
//	         [-api-server URL -ca-file FILE -token-file FILE] < rendered.yaml
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus-operator/prometheus-operator/pkg/assets"
	"github.com/prometheus-operator/prometheus-operator/pkg/operator"
	prompkg "github.com/prometheus-operator/prometheus-operator/pkg/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/yaml"
)

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "opconfig: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	namespace := flag.String("namespace", "", "the monitors' namespace, the Prometheus object's")
	version := flag.String("prometheus-version", operator.DefaultPrometheusVersion, "spec.version")
	endpointSlice := flag.Bool("endpointslice", false, "spec.serviceDiscoveryRole: EndpointSlice")
	apiServer := flag.String("api-server", "", "spec.apiserverConfig.host")
	caFile := flag.String("ca-file", "", "spec.apiserverConfig.tlsConfig.caFile")
	tokenFile := flag.String("token-file", "", "spec.apiserverConfig.authorization.credentialsFile")
	flag.Parse()
	if *namespace == "" {
		fail("-namespace is required")
	}

	var (
		sMons   []*monitoringv1.ServiceMonitor
		pMons   []*monitoringv1.PodMonitor
		secrets []any
	)
	reader := utilyaml.NewYAMLReader(bufio.NewReader(os.Stdin))
	for {
		doc, err := reader.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			fail("reading the input: %v", err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			fail("%v", err)
		}
		var obj any
		switch meta.APIVersion + " " + meta.Kind {
		case "monitoring.coreos.com/v1 ServiceMonitor":
			sm := &monitoringv1.ServiceMonitor{}
			sMons, obj = append(sMons, sm), sm
		case "monitoring.coreos.com/v1 PodMonitor":
			pm := &monitoringv1.PodMonitor{}
			pMons, obj = append(pMons, pm), pm
		case "v1 Secret":
			s := &v1.Secret{}
			secrets, obj = append(secrets, s), s
		default:
			continue
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			fail("%s: %v", meta.Kind, err)
		}
	}

	p := &monitoringv1.Prometheus{
		ObjectMeta: metav1.ObjectMeta{Name: "opconfig", Namespace: *namespace},
		Spec: monitoringv1.PrometheusSpec{CommonPrometheusFields: monitoringv1.CommonPrometheusFields{
			Version:                *version,
			ServiceMonitorSelector: &metav1.LabelSelector{},
			PodMonitorSelector:     &metav1.LabelSelector{},
		}},
	}
	if *endpointSlice {
		role := monitoringv1.EndpointSliceRole
		p.Spec.ServiceDiscoveryRole = &role
	}
	if *apiServer != "" {
		p.Spec.APIServerConfig = &monitoringv1.APIServerConfig{Host: *apiServer}
		if *caFile != "" {
			p.Spec.APIServerConfig.TLSConfig = &monitoringv1.TLSConfig{CAFile: *caFile}
		}
		if *tokenFile != "" {
			p.Spec.APIServerConfig.Authorization = &monitoringv1.Authorization{CredentialsFile: *tokenFile}
		}
	}

	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	store := assets.NewTestStoreBuilder(secrets...)
	rs, err := prompkg.NewResourceSelector(logger, p, store, nil, operator.NewMetrics(prometheus.NewRegistry()),
		record.NewFakeRecorder(100))
	if err != nil {
		fail("%v", err)
	}
	ctx := context.Background()
	selectedSMons, err := rs.SelectServiceMonitors(ctx, lister(sMons))
	if err != nil {
		fail("%v", err)
	}
	selectedPMons, err := rs.SelectPodMonitors(ctx, lister(pMons))
	if err != nil {
		fail("%v", err)
	}
	validSMons, validPMons := selectedSMons.ValidResources(), selectedPMons.ValidResources()
	if len(validSMons) != len(sMons) || len(validPMons) != len(pMons) {
		fail("the operator rejects %d ServiceMonitor(s) and %d PodMonitor(s) of the input (see above)",
			len(sMons)-len(validSMons), len(pMons)-len(validPMons))
	}

	var opts []prompkg.ConfigGeneratorOption
	if *endpointSlice {
		opts = append(opts, prompkg.WithEndpointSliceSupport())
	}
	cg, err := prompkg.NewConfigGenerator(logger, p, opts...)
	if err != nil {
		fail("%v", err)
	}
	out, err := cg.GenerateServerConfiguration(p, validSMons, validPMons, nil, nil, store, nil, nil, nil, nil)
	if err != nil {
		fail("%v", err)
	}
	os.Stdout.Write(out)
}

// lister lists the objects of a namespace that a selector matches, as the
// operator's informers do.
func lister[T metav1.Object](objs []T) prompkg.ListAllByNamespaceFn {
	return func(namespace string, selector labels.Selector, appendFn cache.AppendFunc) error {
		for _, o := range objs {
			if o.GetNamespace() == namespace && selector.Matches(labels.Set(o.GetLabels())) {
				appendFn(o)
			}
		}
		return nil
	}
}

package plugin

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"

	"github.com/example/gamesession-controller/pkg/generated/clientset/versioned"
)

// Clients are the API clients the commands work with.
type Clients struct {
	// Kube reads and writes ConfigMaps: profiles and their revisions.
	Kube kubernetes.Interface
	// Game reads GameSessions and ProfileRollouts.
	Game versioned.Interface
}

// NewRootCommand returns the `kubectl gamesession` command tree, writing to
// streams. It carries kubectl's connection flags (--kubeconfig, --context,
// -n/--namespace, ...); the namespace defaults to the kubeconfig context's.
func NewRootCommand(streams genericiooptions.IOStreams) *cobra.Command {
	flags := genericclioptions.NewConfigFlags(true)
	root := &cobra.Command{
		Use:   "kubectl-gamesession",
		Short: "Follow and steer the profile rollouts of the GameSession controller",
		Long: `Follow and steer the rollout of a profile (a ConfigMap labelled
games.example.com/profile=true) to the GameSessions that reference it.`,
		// Errors are printed once, by main; a usage dump would hide them.
		SilenceUsage:  true,
		SilenceErrors: true,
		// kubectl runs the binary as `kubectl gamesession`: help says so.
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl gamesession"},
	}
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	root.SetUsageFunc(usage)
	// Shell completion is there for those who look for it
	// (kubectl-gamesession completion bash), not in every help text.
	root.CompletionOptions.HiddenDefaultCmd = true
	flags.AddFlags(root.PersistentFlags())
	cfg := &config{flags: flags, streams: streams}

	rollout := &cobra.Command{
		Use:   "rollout",
		Short: "Manage the rollout of a profile",
		Long: `Manage the rollout of a profile to its GameSessions: follow it (status),
pause and resume it, list the profile's revisions (history) and go back to
an earlier one (undo).`,
	}
	rollout.AddCommand(newStatusCommand(cfg), newPauseCommand(cfg), newResumeCommand(cfg),
		newHistoryCommand(cfg), newUndoCommand(cfg))
	root.AddCommand(rollout, newVersionCommand(streams))
	return root
}

// config turns the connection flags into clients, once a command runs.
type config struct {
	flags   *genericclioptions.ConfigFlags
	streams genericiooptions.IOStreams
}

func (c *config) clients() (Clients, string, error) {
	namespace, _, err := c.flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return Clients{}, "", err
	}
	rest, err := c.flags.ToRESTConfig()
	if err != nil {
		return Clients{}, "", err
	}
	kube, err := kubernetes.NewForConfig(rest)
	if err != nil {
		return Clients{}, "", err
	}
	game, err := versioned.NewForConfig(rest)
	if err != nil {
		return Clients{}, "", err
	}
	return Clients{Kube: kube, Game: game}, namespace, nil
}

// isTerminal reports whether w is a terminal, where a progress line can be
// redrawn in place.
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func newStatusCommand(cfg *config) *cobra.Command {
	o := StatusOptions{Watch: true}
	cmd := &cobra.Command{
		Use:   "status PROFILE",
		Short: "Follow a profile's rollout until it completes",
		Long: `Follow the rollout of PROFILE to its GameSessions until it completes, with
the sessions moved to the new revision, ready, busy (their move deferred),
failed, of all, and an estimate of the time left. The rollout's phase and
message are printed as they change.

Exits 0 once the rollout is Complete, non-zero if it is Halted or --timeout
passes first.`,
		Example: `  kubectl gamesession rollout status arena
  kubectl gamesession rollout status arena -n games --timeout=10m
  kubectl gamesession rollout status arena --watch=false`,
		Args: exactArgs("PROFILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			clients, namespace, err := cfg.clients()
			if err != nil {
				return err
			}
			o.Namespace, o.Profile = namespace, args[0]
			o.TTY = isTerminal(cfg.streams.Out)
			return Status(cmd.Context(), clients, cfg.streams.Out, o)
		},
	}
	cmd.Flags().BoolVarP(&o.Watch, "watch", "w", true, "Follow the rollout until it ends; false prints its state once")
	cmd.Flags().DurationVar(&o.Timeout, "timeout", 0, "Give up after this long (e.g. 10m); 0 waits for ever")
	return cmd
}

func newPauseCommand(cfg *config) *cobra.Command {
	return &cobra.Command{
		Use:   "pause PROFILE",
		Short: "Pause a profile's rollout",
		Long: `Pause the rollout of PROFILE: the controller moves no more sessions to the
new revision (those already moving finish). Sets the annotation
rollout.games.example.com/paused=true on the profile.`,
		Args: exactArgs("PROFILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			clients, namespace, err := cfg.clients()
			if err != nil {
				return err
			}
			return Pause(cmd.Context(), clients, cfg.streams.Out, namespace, args[0])
		},
	}
}

func newResumeCommand(cfg *config) *cobra.Command {
	return &cobra.Command{
		Use:   "resume PROFILE",
		Short: "Resume a paused rollout",
		Long: `Resume the paused rollout of PROFILE: removes the annotation
rollout.games.example.com/paused from the profile.`,
		Args: exactArgs("PROFILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			clients, namespace, err := cfg.clients()
			if err != nil {
				return err
			}
			return Resume(cmd.Context(), clients, cfg.streams.Out, namespace, args[0])
		},
	}
}

func newHistoryCommand(cfg *config) *cobra.Command {
	return &cobra.Command{
		Use:   "history PROFILE",
		Short: "List a profile's revisions",
		Long: `List the revisions of PROFILE, oldest first: each content the profile had,
kept by the controller for rollbacks. STATUS marks the revision the sessions
move to (current) and the last one whose rollout completed (stable).`,
		Args: exactArgs("PROFILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			clients, namespace, err := cfg.clients()
			if err != nil {
				return err
			}
			return History(cmd.Context(), clients, cfg.streams.Out, namespace, args[0], time.Now())
		},
	}
}

func newUndoCommand(cfg *config) *cobra.Command {
	var toRevision int
	cmd := &cobra.Command{
		Use:   "undo PROFILE",
		Short: "Roll a profile back to an earlier revision",
		Long: `Write the content of an earlier revision of PROFILE back into the profile:
the one before the current revision, or the one --to-revision names. The
controller then rolls the sessions to it under the profile's rollout policy,
as for any edit. Labels and annotations of the profile are left as they are.

The write carries the profile's resourceVersion: if someone edits the
profile meanwhile, undo fails rather than overwrite their edit.`,
		Example: `  kubectl gamesession rollout undo arena
  kubectl gamesession rollout undo arena --to-revision=3`,
		Args: exactArgs("PROFILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("to-revision") && toRevision <= 0 {
				return fmt.Errorf("--to-revision must be a revision number, 1 or more (see rollout history)")
			}
			clients, namespace, err := cfg.clients()
			if err != nil {
				return err
			}
			return Undo(cmd.Context(), clients, cfg.streams.Out, namespace, args[0], toRevision)
		},
	}
	cmd.Flags().IntVar(&toRevision, "to-revision", 0, "The revision to go back to (see rollout history); default: the one before the current")
	return cmd
}

func newVersionCommand(streams genericiooptions.IOStreams) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the plugin's version",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			version := "(unknown)"
			if info, ok := debug.ReadBuildInfo(); ok {
				version = info.Main.Version
			}
			_, err := fmt.Fprintf(streams.Out, "kubectl-gamesession %s\n", version)
			return err
		},
	}
}

// usage prints a command's usage. Unlike cobra's, it lists the connection
// flags (twenty of them) only in the root command's help, so that each
// command's help fits on a screen.
func usage(cmd *cobra.Command) error {
	var b strings.Builder
	b.WriteString("Usage:\n")
	if cmd.Runnable() {
		fmt.Fprintf(&b, "  %s\n", cmd.UseLine())
	}
	if cmd.HasAvailableSubCommands() {
		fmt.Fprintf(&b, "  %s [command]\n", cmd.CommandPath())
	}
	if cmd.HasExample() {
		fmt.Fprintf(&b, "\nExamples:\n%s\n", cmd.Example)
	}
	if cmd.HasAvailableSubCommands() {
		b.WriteString("\nCommands:\n")
		for _, sub := range cmd.Commands() {
			if sub.IsAvailableCommand() {
				fmt.Fprintf(&b, "  %-10s %s\n", sub.Name(), sub.Short)
			}
		}
	}
	if cmd.HasAvailableLocalFlags() {
		fmt.Fprintf(&b, "\nFlags:\n%s", cmd.LocalFlags().FlagUsages())
	}
	if cmd.HasAvailableInheritedFlags() {
		fmt.Fprintf(&b, "\nkubectl's connection flags (--kubeconfig, --context, -n/--namespace, ...) apply too: see %s --help.\n",
			cmd.Root().CommandPath())
	}
	if cmd.HasAvailableSubCommands() {
		fmt.Fprintf(&b, "\nUse \"%s [command] --help\" for more about a command.\n", cmd.CommandPath())
	}
	_, err := io.WriteString(cmd.OutOrStderr(), b.String())
	return err
}

// exactArgs accepts exactly one argument, and names it when it is missing.
func exactArgs(name string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		switch {
		case len(args) == 1:
			return nil
		case len(args) == 0:
			return fmt.Errorf("%s is required: %s", name, cmd.UseLine())
		default:
			return errors.New("only one " + name + " at a time: " + cmd.UseLine())
		}
	}
}

// The shell: who is logged in, the navigation, and which page the path names.

import { useEffect, useState } from "preact/hooks";
import { clusterPermissions, getMe, getPermissionsSummary, logout } from "./api/endpoints";
import { setToken, setUnauthorizedHandler } from "./api/http";
import type { User } from "./api/types";
import { ClusterMessageBanner } from "./components/ClusterMessageBanner";
import { Link } from "./components/Link";
import { printable } from "./format";
import { AuditPage } from "./pages/AuditPage";
import { ClusterPage } from "./pages/ClusterPage";
import { ExperimentPage } from "./pages/ExperimentPage";
import { ExperimentsPage } from "./pages/ExperimentsPage";
import { LoginPage } from "./pages/LoginPage";
import { ModelPage } from "./pages/ModelPage";
import { ModelsPage } from "./pages/ModelsPage";
import { QueuePage } from "./pages/QueuePage";
import { TaskOpenPage } from "./pages/TaskOpenPage";
import { TaskPage } from "./pages/TaskPage";
import { TasksPage } from "./pages/TasksPage";
import { TrialPage } from "./pages/TrialPage";
import { WorkspacePage } from "./pages/WorkspacePage";
import { match, navigate, useLocation } from "./router";

function loginPath(): string {
  const here = location.pathname + location.search;
  return here.startsWith("/login") ? here : `/login?redirect=${encodeURIComponent(here)}`;
}

setUnauthorizedHandler(() => {
  setToken(null);
  if (!location.pathname.startsWith("/login")) navigate(loginPath(), { replace: true });
});

export function App() {
  const { path } = useLocation();
  const [user, setUser] = useState<User | null | undefined>(undefined);
  // What the user may do cluster-wide, by the roles they hold (an admin: everything).
  const [held, setHeld] = useState<Set<string>>(new Set());

  useEffect(() => {
    if (path.startsWith("/login") || user) return;
    const controller = new AbortController();
    getMe(controller.signal)
      .then((response) => setUser(response.user))
      .catch(() => setUser(null));
    return () => controller.abort();
  }, [path, user]);

  useEffect(() => {
    if (!user) return;
    const controller = new AbortController();
    getPermissionsSummary(controller.signal)
      .then((summary) => setHeld(clusterPermissions(summary)))
      .catch(() => setHeld(new Set()));
    return () => controller.abort();
  }, [user]);
  const may = (permission: string) => user?.admin === true || held.has(`PERMISSION_TYPE_${permission}`);

  if (path.startsWith("/login")) {
    return <LoginPage onLogin={(u) => setUser(u)} />;
  }

  const onLogout = async () => {
    try {
      await logout();
    } catch {
      // The session may already be gone; forgetting it here is what matters.
    }
    setToken(null);
    setUser(undefined);
    navigate("/login", { replace: true });
  };

  return (
    <div class="shell">
      <header class="topbar">
        <Link href="/experiments" class="brand">
          Cairn
        </Link>
        <nav aria-label="Main">
          <Link href="/experiments" class={path.startsWith("/experiments") || path.startsWith("/trials") ? "active" : ""}>
            Experiments
          </Link>
          <Link href="/models" class={path.startsWith("/models") ? "active" : ""}>
            Models
          </Link>
          <Link href="/tasks" class={path.startsWith("/tasks") ? "active" : ""}>
            Tasks
          </Link>
          <Link href="/queue" class={path.startsWith("/queue") ? "active" : ""}>
            Queue
          </Link>
          <Link href="/cluster" class={path.startsWith("/cluster") || path.startsWith("/workspaces") ? "active" : ""}>
            Cluster
          </Link>
          {may("VIEW_MASTER_LOGS") ? (
            <Link href="/audit" class={path.startsWith("/audit") ? "active" : ""}>
              Audit
            </Link>
          ) : null}
        </nav>
        <div class="user">
          {user ? <span aria-label="Signed in as">{printable(user.displayName || user.username)}</span> : null}
          <button type="button" onClick={onLogout}>
            Log out
          </button>
        </div>
      </header>
      <ClusterMessageBanner />
      <main>
        <Page path={path} may={may} />
      </main>
    </div>
  );
}

function Redirect(props: { to: string }) {
  useEffect(() => navigate(props.to, { replace: true }), [props.to]);
  return null;
}

function Page(props: { path: string; may: (permission: string) => boolean }) {
  const { path, may } = props;
  if (path === "/" || path === "") return <Redirect to="/experiments" />;
  if (match("/experiments", path)) return <ExperimentsPage />;
  const experiment = match("/experiments/:id", path);
  if (experiment) return <ExperimentPage key={experiment.id} id={Number(experiment.id)} />;
  const trial = match("/trials/:id", path) ?? match("/experiments/:eid/trials/:id", path);
  if (trial) return <TrialPage key={trial.id} id={Number(trial.id)} />;
  if (match("/models", path)) return <ModelsPage />;
  const model = match("/models/:name", path);
  if (model) return <ModelPage key={model.name} name={model.name} />;
  if (match("/tasks", path)) return <TasksPage />;
  const opening = match("/tasks/:id/open", path);
  if (opening) return <TaskOpenPage key={opening.id} taskId={opening.id} />;
  const task = match("/tasks/:id", path);
  if (task) return <TaskPage key={task.id} taskId={task.id} />;
  if (match("/cluster", path)) return <ClusterPage admin={may("MODIFY_RP_WORKSPACE_BINDINGS")} />;
  if (match("/queue", path)) return <QueuePage />;
  if (match("/audit", path)) return <AuditPage admin={may("VIEW_MASTER_LOGS")} />;
  const workspace = match("/workspaces/:id", path);
  if (workspace) return <WorkspacePage key={workspace.id} id={Number(workspace.id)} admin={may("SET_RESOURCE_QUOTAS")} />;
  return (
    <section>
      <h1>Not found</h1>
      <p>
        There is no page at <code>{path}</code>. <Link href="/experiments">Go to the experiments</Link>.
      </p>
    </section>
  );
}

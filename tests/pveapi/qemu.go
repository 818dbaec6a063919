package pveapi

import (
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// numericKeys are the config keys qemu-server's $confdesc
// (PVE/QemuServer.pm) types integer, number or boolean: the API returns
// them as JSON numbers, the rest as strings (bpg decodes cores, sockets,
// cpuunits into Go integers and fails on a string).
var numericKeys = map[string]bool{"onboot": true, "autostart": true, "reboot": true, "cpulimit": true, "cpuunits": true,
	"balloon": true, "shares": true, "smp": true, "sockets": true, "cores": true, "numa": true, "keephugepages": true,
	"vcpus": true, "acpi": true, "kvm": true, "tdf": true, "localtime": true, "freeze": true, "template": true,
	"tablet": true, "migrate_speed": true, "migrate_downtime": true, "snaptime": true, "protection": true, "allow-ksm": true}

// typed returns a config value as the API answers it.
func typed(k, v string) any {
	if numericKeys[k] {
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			return f
		}
	}
	return v
}

// diskKey matches a drive key (qemu-server PVE::QemuServer::Drive).
var diskKey = regexp.MustCompile(`^(ide|sata|scsi|virtio|efidisk|tpmstate)\d+$`)

// newDisk is qemu-server's NEW_DISK_RE: "<storage>:<size in GiB>".
var newDisk = regexp.MustCompile(`^(([^/:\s]+):)?(\d+(\.\d+)?)$`)

// ownerOf reads the owner VM id of a volume name (vm-<id>-disk-<n>,
// vm-<id>-cloudinit), as pve-storage's parse_volname does; 0 for none.
var ownerRE = regexp.MustCompile(`^(?:\d+/)?(?:vm|base)-(\d+)-`)

func ownerOf(volname string) int {
	if m := ownerRE.FindStringSubmatch(volname); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n
	}
	return 0
}

// formatSize prints a size as PVE::JSONSchema::format_size does: the
// largest unit (T, G, M, K) that divides it.
func formatSize(b int64) string {
	for _, u := range []struct {
		s string
		n int64
	}{{"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}} {
		if b%u.n == 0 {
			return strconv.FormatInt(b/u.n, 10) + u.s
		}
	}
	return strconv.FormatInt(b, 10)
}

// parseSize reads "64G", "512M", "+2G" (qemu-server resize's size).
func parseSize(s string) (int64, bool, error) {
	rel := strings.HasPrefix(s, "+")
	s = strings.TrimPrefix(s, "+")
	mult := int64(1)
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'K':
			mult, s = 1<<10, s[:n-1]
		case 'M':
			mult, s = 1<<20, s[:n-1]
		case 'G':
			mult, s = 1<<30, s[:n-1]
		case 'T':
			mult, s = 1<<40, s[:n-1]
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	return int64(f * float64(mult)), rel, err
}

// drive is a parsed drive value: the file and its options in order.
type drive struct {
	file string
	opts [][2]string
}

// parseDrive reads a drive value as PVE::JSONSchema::parse_property_string
// does: Perl's split(/,/) drops empty fields, so bpg's trailing comma
// ("file=cdrom,media=cdrom,") is no option.
func parseDrive(v string) drive {
	parts := strings.Split(v, ",")
	d := drive{}
	for i, p := range parts {
		if p == "" {
			continue
		}
		k, val, ok := strings.Cut(p, "=")
		switch {
		case i == 0 && !ok:
			d.file = p
		case k == "file" || k == "volume":
			d.file = val
		default:
			d.opts = append(d.opts, [2]string{k, val})
		}
	}
	return d
}

func (d drive) get(k string) string {
	for _, o := range d.opts {
		if o[0] == k {
			return o[1]
		}
	}
	return ""
}

func (d *drive) set(k, v string) {
	for i, o := range d.opts {
		if o[0] == k {
			d.opts[i][1] = v
			return
		}
	}
	d.opts = append(d.opts, [2]string{k, v})
}

func (d *drive) del(k string) {
	d.opts = slices.DeleteFunc(d.opts, func(o [2]string) bool { return o[0] == k })
}

// String prints a drive as print_drive does: file first, options sorted.
func (d drive) String() string {
	opts := slices.Clone(d.opts)
	slices.SortFunc(opts, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	s := d.file
	for _, o := range opts {
		s += "," + o[0] + "=" + o[1]
	}
	return s
}

// volume finds a volume by id on host.
func (h *Host) volume(volid string) (*Storage, *Volume) {
	sid, _, _ := strings.Cut(volid, ":")
	st, ok := h.storages[sid]
	if !ok {
		return nil, nil
	}
	return st, st.volumes[volid]
}

// allocName is PVE::Storage::Plugin::find_free_diskname: the lowest free
// vm-<vmid>-disk-<n> on the storage.
func allocName(st *Storage, sid string, vmid int) string {
	for n := 0; ; n++ {
		id := fmt.Sprintf("%s:vm-%d-disk-%d", sid, vmid, n)
		if _, ok := st.volumes[id]; !ok {
			return id
		}
	}
}

// checkDrives is qemu-server API2/Qemu.pm $check_storage_access: a new
// disk needs Datastore.AllocateSpace on its storage, which must hold
// images; an existing volume passes pve-storage check_volume_access (the
// owner, or Datastore.Allocate on the storage, or for another VM's
// images Datastore.Audit on the storage and VM.Config.Disk on the owner);
// an import source passes check_volume_access too.
func (s *Server) checkDrives(q *req, h *Host, vmid int, settings map[string]string) *apiError {
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		if !diskKey.MatchString(k) {
			continue
		}
		d := parseDrive(settings[k])
		if d.get("media") == "cdrom" || d.file == "none" || d.file == "" {
			continue
		}
		sid, volname, _ := strings.Cut(d.file, ":")
		switch {
		case volname == "cloudinit":
			if err := q.check("/storage/"+sid, "Datastore.AllocateSpace"); err != nil {
				return err
			}
		case newDisk.MatchString(d.file):
			if err := q.check("/storage/"+sid, "Datastore.AllocateSpace"); err != nil {
				return err
			}
			if st := h.storages[sid]; st == nil || !slices.Contains(st.Content, "images") {
				return paramErr("storage", fmt.Sprintf("storage '%s' does not support vm images", sid))
			}
		default:
			if err := s.checkVolumeAccess(q, h, vmid, d.file); err != nil {
				return err
			}
		}
		if src := d.get("import-from"); src != "" {
			if err := s.checkVolumeAccess(q, h, vmid, src); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkVolumeAccess is pve-storage PVE::Storage::check_volume_access.
func (s *Server) checkVolumeAccess(q *req, h *Host, vmid int, volid string) *apiError {
	sid, volname, ok := strings.Cut(volid, ":")
	if !ok {
		return fail(http.StatusInternalServerError, "Only root can pass arbitrary filesystem paths.")
	}
	if q.can("/storage/"+sid, "Datastore.Allocate") {
		return nil
	}
	st, v := h.volume(volid)
	vtype := "images"
	if v != nil {
		vtype = v.Content
	} else if st != nil && strings.HasPrefix(volname, "import/") {
		vtype = "import"
	}
	owner := ownerOf(volname)
	switch {
	case vtype == "iso" || vtype == "vztmpl" || vtype == "import":
		if q.can("/storage/"+sid, "Datastore.AllocateSpace") || q.can("/storage/"+sid, "Datastore.Audit") {
			return nil
		}
		return fail(http.StatusForbidden, "Permission check failed (/storage/%s, Datastore.AllocateSpace|Datastore.Audit)", sid)
	case owner != 0 && owner == vmid:
		return nil
	case vtype == "images" && owner != 0:
		if err := q.check("/storage/"+sid, "Datastore.Audit"); err != nil {
			return err
		}
		return q.check(fmt.Sprintf("/vms/%d", owner), "VM.Config.Disk")
	}
	return fail(http.StatusInternalServerError, "missing privileges to access %s", volid)
}

// applyDrives is qemu-server's create_disks, run in the worker: a new disk
// is allocated (find_free_diskname), an import-from disk is a new volume
// with the source's content and virtual size, an existing volume is
// attached with its current size (volume_size_info; "volume ... does not
// exist" if it has none); each drive is written with size=. On an error the
// volumes allocated so far are freed.
func (s *Server) applyDrives(h *Host, vmid int, settings map[string]string) (map[string]string, error) {
	out := map[string]string{}
	var made []string
	free := func() {
		for _, id := range made {
			st, _ := h.volume(id)
			delete(st.volumes, id)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		if !diskKey.MatchString(k) {
			continue
		}
		d := parseDrive(settings[k])
		if d.file == "" || d.file == "none" || d.file == "cdrom" {
			// qemu-server API2/Qemu.pm $create_disks: no volume, "none"
			// (an empty drive) or "cdrom" (the host's drive) is written
			// as PVE::QemuServer::print_drive prints it, without size:
			// bpg's "file=cdrom,media=cdrom," reads back
			// "cdrom,media=cdrom" (the double stored it raw before).
			d.del("size")
			out[k] = d.String()
			continue
		}
		if d.get("media") == "cdrom" {
			out[k] = d.String()
			continue
		}
		sid, volname, _ := strings.Cut(d.file, ":")
		st := h.storages[sid]
		if st == nil {
			free()
			return nil, fmt.Errorf("storage '%s' does not exist", sid)
		}
		switch {
		case volname == "cloudinit":
			id := fmt.Sprintf("%s:vm-%d-cloudinit", sid, vmid)
			st.volumes[id] = &Volume{VolID: id, Content: "images", Owner: vmid, Format: "raw", Size: 4 << 20}
			made = append(made, id)
			d.file = id
			d.set("media", "cdrom")
		case newDisk.MatchString(d.file):
			gib, _ := strconv.ParseFloat(strings.TrimPrefix(volname, ""), 64)
			size := int64(gib * float64(GiB))
			var data []byte
			if src := d.get("import-from"); src != "" {
				_, sv := h.volume(src)
				if sv == nil {
					free()
					return nil, fmt.Errorf("volume '%s' does not exist", src)
				}
				size, data = sv.virtual, sv.Data
				if size == 0 {
					size = sv.Size
				}
				d.del("import-from")
			}
			id := allocName(st, sid, vmid)
			format := d.get("format")
			if format == "" || st.Type == "lvmthin" {
				format = "raw"
			}
			st.volumes[id] = &Volume{VolID: id, Content: "images", Owner: vmid, Format: format, Size: size, Data: data}
			made = append(made, id)
			d.file = id
			d.del("format")
			d.set("size", formatSize(size))
		default:
			v := st.volumes[d.file]
			if v == nil || v.Size == 0 {
				free()
				return nil, fmt.Errorf("volume %s does not exist", d.file)
			}
			if v.Content != "images" && v.Content != "iso" {
				free()
				return nil, fmt.Errorf("cannot use volume %s - content type needs to be 'images' or 'iso'", d.file)
			}
			if f := d.get("format"); f != "" && f != v.Format {
				free()
				return nil, fmt.Errorf("drive '%s' - volume '%s' - 'format=%s' option different from storage format '%s'", k, d.file, f, v.Format)
			}
			d.set("size", formatSize(v.Size))
		}
		out[k] = d.String()
	}
	return out, nil
}

// createVM is POST /nodes/{node}/qemu (qemu-server API2/Qemu.pm create_vm):
// VM.Allocate on /vms/<vmid>, the storage checks, SDN.Use on the bridge's
// zone for a NIC (check_bridge_access); an existing id is refused before
// the worker ("VM <id> already exists on node '<node>'"); the worker
// creates the disks and writes the config.
func (s *Server) createVM(q *req, h *Host) (any, *apiError) {
	vmid, err := strconv.Atoi(q.form.Get("vmid"))
	if err != nil || vmid < 100 {
		return nil, paramErr("vmid", "value must have a minimum value of 100")
	}
	if err := q.check(fmt.Sprintf("/vms/%d", vmid), "VM.Allocate"); err != nil {
		return nil, err
	}
	settings := map[string]string{}
	for k, v := range q.form {
		if k != "vmid" && k != "node" && len(v) > 0 {
			settings[k] = v[0]
		}
	}
	if err := s.checkConfigPerms(q, h, vmid, settings); err != nil {
		return nil, err
	}
	if v, ok := s.vms[vmid]; ok {
		return nil, fail(http.StatusInternalServerError, "unable to create VM %d: config file already exists on node '%s'", vmid, v.Node)
	}
	start := settings["start"] == "1"
	delete(settings, "start")
	// The config file is created (locked) at once: a second create of the id fails.
	s.vms[vmid] = &VM{VMID: vmid, Node: h.Name, Status: "stopped", Config: map[string]string{"lock": "create"}}
	upid := s.startTask(q, h.Name, "qmcreate", strconv.Itoa(vmid), s.TaskDuration, func() error {
		drives, err := s.applyDrives(h, vmid, settings)
		if err != nil {
			delete(s.vms, vmid)
			return err
		}
		cfg := map[string]string{}
		maps.Copy(cfg, settings)
		maps.Copy(cfg, drives)
		if _, ok := cfg["smbios1"]; !ok {
			cfg["smbios1"] = fmt.Sprintf("uuid=00000000-0000-4000-8000-%012d", vmid)
		}
		cfg["vmgenid"] = fmt.Sprintf("00000000-0000-4000-9000-%012d", vmid)
		cfg["meta"] = "creation-qemu=9.2.0,ctime=1733140000"
		s.vms[vmid].Config = cfg
		if start {
			if err := s.startable(h, s.vms[vmid]); err != nil {
				return err
			}
			s.setStatus(s.vms[vmid], "running")
		}
		return nil
	})
	return upid, nil
}

// checkConfigPerms is the part of check_vm_modify_config_perm and
// $check_storage_access that the prod stack reaches: VM.Config.Disk for
// drives, VM.Config.CDROM for a cdrom, VM.Config.Memory, VM.Config.CPU,
// VM.Config.Network (+ SDN.Use on the bridge), VM.Config.Cloudinit,
// VM.Config.HWType, VM.Config.Options for the rest.
func (s *Server) checkConfigPerms(q *req, h *Host, vmid int, settings map[string]string) *apiError {
	vm := fmt.Sprintf("/vms/%d", vmid)
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		var priv string
		switch {
		case diskKey.MatchString(k):
			priv = "VM.Config.Disk"
			if parseDrive(settings[k]).get("media") == "cdrom" {
				priv = "VM.Config.CDROM"
			}
		case k == "memory" || k == "balloon" || k == "shares":
			priv = "VM.Config.Memory"
		case k == "cores" || k == "sockets" || k == "cpu" || k == "vcpus" || k == "numa" || k == "cpulimit" || k == "cpuunits" || k == "affinity":
			priv = "VM.Config.CPU"
		case strings.HasPrefix(k, "net"):
			priv = "VM.Config.Network"
			if b := parseDrive(settings[k]).get("bridge"); b != "" {
				if err := q.check("/sdn/zones/localnetwork/"+b, "SDN.Use"); err != nil {
					return err
				}
			}
		case strings.HasPrefix(k, "ipconfig") || k == "cicustom" || k == "nameserver" || k == "searchdomain" || k == "ciuser" || k == "cipassword" || k == "sshkeys" || k == "citype" || k == "ciupgrade":
			priv = "VM.Config.Cloudinit"
		case k == "scsihw" || k == "bios" || k == "machine" || k == "vga" || strings.HasPrefix(k, "serial") || strings.HasPrefix(k, "usb") || k == "tablet" || k == "keyboard" || strings.HasPrefix(k, "hostpci") || k == "audio0" || k == "rng0":
			priv = "VM.Config.HWType"
		case k == "delete" || k == "digest" || k == "revert" || k == "skiplock" || k == "background_delay":
			continue
		default:
			priv = "VM.Config.Options"
		}
		if err := q.check(vm, priv); err != nil {
			return err
		}
	}
	return s.checkDrives(q, h, vmid, settings)
}

// qemu serves /nodes/{node}/qemu/{vmid}/...
func (s *Server) qemu(q *req, h *Host, vmid int, rest []string) (any, *apiError) {
	v, ok := s.vms[vmid]
	if !ok || v.Node != h.Name || (v.Type != "" && v.Type != "qemu") {
		// qemu-server PVE::QemuConfig::load_config.
		return nil, fail(http.StatusInternalServerError, "Configuration file 'nodes/%s/qemu-server/%d.conf' does not exist", h.Name, vmid)
	}
	vmPath := fmt.Sprintf("/vms/%d", vmid)
	m := q.method
	switch {
	case m == "GET" && match(rest, "config"), m == "GET" && match(rest, "pending"):
		if err := q.check(vmPath, "VM.Audit"); err != nil {
			return nil, err
		}
		cfg := map[string]any{"digest": configDigest(v.Config)}
		for k, val := range v.Config {
			cfg[k] = typed(k, val)
		}
		if match(rest, "pending") {
			var out []map[string]any
			for _, k := range slices.Sorted(maps.Keys(v.Config)) {
				out = append(out, map[string]any{"key": k, "value": typed(k, v.Config[k])})
			}
			return out, nil
		}
		return cfg, nil
	case m == "GET" && match(rest, "status", "current"):
		if err := q.check(vmPath, "VM.Audit"); err != nil {
			return nil, err
		}
		st := map[string]any{"vmid": vmid, "name": v.Config["name"], "status": v.Status, "qmpstatus": v.Status,
			"maxmem": memBytes(v.Config), "cpus": atoiOr(v.Config["cores"], 1), "ha": map[string]any{"managed": 0}}
		if v.Status == "running" {
			st["pid"] = 4242 + vmid
			st["uptime"] = 1
		}
		if v.Config["lock"] != "" {
			st["lock"] = v.Config["lock"]
		}
		return st, nil
	case (m == "PUT" || m == "POST") && match(rest, "config"):
		return s.updateVM(q, h, v, m == "POST")
	case m == "POST" && len(rest) == 2 && rest[0] == "status":
		return s.power(q, h, v, rest[1])
	case m == "PUT" && match(rest, "resize"):
		return s.resize(q, h, v)
	case m == "DELETE" && len(rest) == 0:
		return s.destroy(q, h, v)
	case m == "PUT" && match(rest, "cloudinit"):
		if err := q.check(vmPath, "VM.Config.Cloudinit"); err != nil {
			return nil, err
		}
		return nil, nil
	}
	return nil, fail(http.StatusNotImplemented, "Method '%s /nodes/%s/qemu/%d/%s' not implemented", m, h.Name, vmid, strings.Join(rest, "/"))
}

// updateVM is PUT (sync) and POST (async) /config (qemu-server
// update_vm_api): the permission checks, a digest that no longer matches
// is refused, delete= removes keys, drives are created or attached as on
// create. A changed key of a running VM would be pending in PVE (not
// hotplugged); the double applies it and journals the request.
func (s *Server) updateVM(q *req, h *Host, v *VM, async bool) (any, *apiError) {
	settings := map[string]string{}
	for k, val := range q.form {
		if len(val) > 0 && k != "node" && k != "vmid" {
			settings[k] = val[0]
		}
	}
	if err := s.checkConfigPerms(q, h, v.VMID, settings); err != nil {
		return nil, err
	}
	for _, k := range strings.FieldsFunc(settings["delete"], func(r rune) bool { return r == ',' || r == ';' || r == ' ' }) {
		if err := s.checkConfigPerms(q, h, v.VMID, map[string]string{k: v.Config[k]}); err != nil {
			return nil, err
		}
	}
	if d := settings["digest"]; d != "" && d != configDigest(v.Config) {
		return nil, fail(http.StatusInternalServerError, "detected modified configuration - file changed by other user? Try again.")
	}
	apply := func() error {
		drives, err := s.applyDrives(h, v.VMID, settings)
		if err != nil {
			return err
		}
		for _, k := range strings.FieldsFunc(settings["delete"], func(r rune) bool { return r == ',' || r == ';' || r == ' ' }) {
			if diskKey.MatchString(k) && v.Config["protection"] == "1" {
				return fmt.Errorf("can't remove drive '%s' - protection mode enabled", k)
			}
			delete(v.Config, k)
		}
		for k, val := range settings {
			if k == "delete" || k == "digest" || k == "background_delay" || k == "skiplock" {
				continue
			}
			if d, ok := drives[k]; ok {
				val = d
			}
			v.Config[k] = val
		}
		return nil
	}
	if !async {
		if err := apply(); err != nil {
			return nil, fail(http.StatusInternalServerError, "%s", err.Error())
		}
		return nil, nil
	}
	return s.startTask(q, h.Name, "qmconfig", strconv.Itoa(v.VMID), s.TaskDuration, apply), nil
}

// power is POST /status/{start,stop,shutdown,reboot} (qemu-server
// vm_start, vm_stop, vm_shutdown, vm_reboot: VM.PowerMgmt), as tasks.
func (s *Server) power(q *req, h *Host, v *VM, op string) (any, *apiError) {
	if err := q.check(fmt.Sprintf("/vms/%d", v.VMID), "VM.PowerMgmt"); err != nil {
		return nil, err
	}
	id := strconv.Itoa(v.VMID)
	switch op {
	case "start":
		if v.Status == "running" {
			// qemu-server vm_start: "VM <id> already running"
			return nil, fail(http.StatusInternalServerError, "VM %d already running", v.VMID)
		}
		if v.Config["template"] == "1" {
			return nil, fail(http.StatusInternalServerError, "you can't start a vm if it's a template")
		}
		return s.startTask(q, h.Name, "qmstart", id, s.TaskDuration, func() error {
			if _, ok := s.vms[v.VMID]; !ok {
				return fmt.Errorf("VM %d does not exist", v.VMID)
			}
			if err := s.startable(h, v); err != nil {
				return err
			}
			s.setStatus(v, "running")
			return nil
		}), nil
	case "stop", "shutdown":
		// shutdown is an ACPI request the guest acts on (Talos powers
		// off on the power button); stop cuts the power. Either way the
		// guest ends stopped, which OnPower tells the guest's double.
		return s.startTask(q, h.Name, "qm"+op, id, s.TaskDuration, func() error {
			s.setStatus(v, "stopped")
			return nil
		}), nil
	case "reboot":
		return s.startTask(q, h.Name, "qmreboot", id, s.TaskDuration, func() error {
			if v.Status != "running" {
				return fmt.Errorf("VM %d not running", v.VMID)
			}
			return nil
		}), nil
	}
	return nil, fail(http.StatusNotImplemented, "Method 'POST /nodes/%s/qemu/%d/status/%s' not implemented", h.Name, v.VMID, op)
}

// startable is what vm_start checks of the config before QEMU runs, as
// far as the prod stack reaches it: the nocloud drive is generated from
// the cicustom snippets (qemu-server PVE::QemuServer::Cloudinit
// apply_cloudinit_config -> read_cloudinit_snippets_file), which dies on a
// missing file (pve-storage PVE::Storage::abs_filesystem_path: "can't find
// file '<volid>'").
func (s *Server) startable(h *Host, v *VM) error {
	for _, part := range strings.Split(v.Config["cicustom"], ",") {
		_, volid, ok := strings.Cut(part, "=")
		if !ok || volid == "" {
			continue
		}
		if _, vol := h.volume(volid); vol == nil {
			return fmt.Errorf("can't find file '%s'", volid)
		}
	}
	return nil
}

// UserData returns the snippet a guest's nocloud drive carries as
// user-data (cicustom user=<volid>), as PVE builds the drive at start:
// nil when it names none or the file is gone.
func (s *Server) UserData(vmid int) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.vms[vmid]
	if v == nil {
		return nil
	}
	for _, part := range strings.Split(v.Config["cicustom"], ",") {
		if k, volid, _ := strings.Cut(part, "="); k == "user" {
			if _, vol := s.hosts[v.Node].volume(volid); vol != nil {
				return slices.Clone(vol.Data)
			}
		}
	}
	return nil
}

// resize is PUT /resize (qemu-server API2/Qemu.pm resize_vm: VM.Config.Disk,
// Datastore.AllocateSpace on the volume's storage; "+<size>" grows by it;
// a smaller size is refused, "shrinking disks is not supported"), a task
// in PVE 8.
func (s *Server) resize(q *req, h *Host, v *VM) (any, *apiError) {
	if err := q.check(fmt.Sprintf("/vms/%d", v.VMID), "VM.Config.Disk"); err != nil {
		return nil, err
	}
	key := q.form.Get("disk")
	raw, ok := v.Config[key]
	if !ok {
		return nil, fail(http.StatusInternalServerError, "disk '%s' does not exist", key)
	}
	d := parseDrive(raw)
	sid, _, _ := strings.Cut(d.file, ":")
	if err := q.check("/storage/"+sid, "Datastore.AllocateSpace"); err != nil {
		return nil, err
	}
	_, vol := h.volume(d.file)
	if vol == nil {
		return nil, fail(http.StatusInternalServerError, "volume '%s' does not exist", d.file)
	}
	n, rel, err := parseSize(q.form.Get("size"))
	if err != nil {
		return nil, paramErr("size", "value does not match the regex pattern")
	}
	newSize := n
	if rel {
		newSize = vol.Size + n
	}
	if newSize < vol.Size {
		return nil, fail(http.StatusInternalServerError, "shrinking disks is not supported")
	}
	return s.startTask(q, h.Name, "resize", strconv.Itoa(v.VMID), s.TaskDuration, func() error {
		vol.Size = newSize
		d.set("size", formatSize(newSize))
		v.Config[key] = d.String()
		return nil
	}), nil
}

// destroy is DELETE /nodes/{node}/qemu/{vmid} (qemu-server API2/Qemu.pm
// destroy_vm and PVE::QemuServer::destroy_vm): VM.Allocate; a protected
// guest ("can't remove VM <id> - protection mode enabled") or a running
// one ("VM <id> is running - destroy failed") is refused before the
// worker. The worker frees only the volumes its config references that it
// owns (a volume of another VM id, such as a holder's disk, is left
// alone); with destroy-unreferenced-disks=1 also every volume of its id on
// every storage of the host.
func (s *Server) destroy(q *req, h *Host, v *VM) (any, *apiError) {
	if err := q.check(fmt.Sprintf("/vms/%d", v.VMID), "VM.Allocate"); err != nil {
		return nil, err
	}
	early := func() error {
		if v.Config["protection"] == "1" {
			return fmt.Errorf("can't remove VM %d - protection mode enabled", v.VMID)
		}
		if v.Status == "running" {
			return fmt.Errorf("VM %d is running - destroy failed", v.VMID)
		}
		return nil
	}
	if err := early(); err != nil {
		return nil, fail(http.StatusInternalServerError, "%s", err.Error())
	}
	purgeUnreferenced := q.form.Get("destroy-unreferenced-disks") == "1"
	return s.startTask(q, h.Name, "qmdestroy", strconv.Itoa(v.VMID), s.TaskDuration, func() error {
		if err := early(); err != nil {
			return err
		}
		for _, k := range slices.Sorted(maps.Keys(v.Config)) {
			if !diskKey.MatchString(k) && !strings.HasPrefix(k, "unused") {
				continue
			}
			d := parseDrive(v.Config[k])
			if d.get("media") == "cdrom" && !strings.HasSuffix(d.file, "-cloudinit") {
				continue
			}
			st, vol := h.volume(d.file)
			if vol != nil && vol.Owner == v.VMID {
				delete(st.volumes, vol.VolID)
			}
		}
		if purgeUnreferenced {
			for _, st := range h.storages {
				for id, vol := range st.volumes {
					if vol.Owner == v.VMID && vol.Content == "images" {
						delete(st.volumes, id)
					}
				}
			}
		}
		delete(s.vms, v.VMID)
		return nil
	}), nil
}

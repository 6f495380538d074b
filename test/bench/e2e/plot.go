package main

import (
	"image/color"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// panel is one chart of the scale plot: figures of the create (or delete) waves against the
// number of snapshots present.
type panel struct {
	title, unit string
	phase       string
	series      []series
}

// series is one line of a panel, read from each wave.
type series struct {
	name  string
	value func(*wave) float64
}

var scalePanels = []panel{
	{title: "create → ready, per wave", unit: "seconds", phase: "create", series: []series{
		{"p50", func(w *wave) float64 { return w.LatencyP50 }}, {"p99", func(w *wave) float64 { return w.LatencyP99 }}}},
	{title: "snapshots ready per second, per wave", unit: "1/s", phase: "create", series: []series{
		{"", func(w *wave) float64 { return w.PerSecond }}}},
	{title: "API-server CPU per snapshot created", unit: "ms", phase: "create", series: []series{
		{"", func(w *wave) float64 { return w.CPUMsPerSnapshot[procAPIServer] }}}},
	{title: "resident memory", unit: "MiB", phase: "create", series: []series{
		{"controller", func(w *wave) float64 { return w.RSSMiB[procController] }},
		{"sidecar", func(w *wave) float64 { return w.RSSMiB[procSidecar] }}}},
	{title: "etcd database file", unit: "MiB", phase: "create", series: []series{
		{"", func(w *wave) float64 { return w.EtcdMiB }}}},
	{title: "delete → gone, per wave", unit: "seconds", phase: "delete", series: []series{
		{"p50", func(w *wave) float64 { return w.LatencyP50 }}, {"p99", func(w *wave) float64 { return w.LatencyP99 }}}},
}

// sideColors tell the sides apart; the series of a side differ in their dashes.
var sideColors = []color.Color{color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}}

// plotScale draws the panels, two per row, into a PNG at path.
func plotScale(res *scaleResults, path string) error {
	const cols = 2
	rows := (len(scalePanels) + cols - 1) / cols
	img := vgimg.New(vg.Points(1100), vg.Points(float64(330*rows)+30))
	dc := draw.New(img)
	title := "Shutter at scale, " + res.Started.Format("2006-01-02") + " (snapshots present →)"
	dc.FillText(draw.TextStyle{Color: color.Black, Font: font.From(plot.DefaultFont, 14), XAlign: draw.XCenter, Handler: plot.DefaultTextHandler},
		vg.Point{X: dc.Max.X / 2, Y: dc.Max.Y - 18}, title)
	dc.Max.Y -= 30
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	for i, pn := range scalePanels {
		p, err := pn.draw(res)
		if err != nil {
			return err
		}
		p.Draw(tiles.At(dc, i%cols, i/cols))
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (pn panel) draw(res *scaleResults) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = pn.title
	p.X.Label.Text = "snapshots"
	p.Y.Label.Text = pn.unit
	p.Y.Min = 0
	p.Legend.Top = true
	top := 0.0
	for si, side := range res.Sides {
		waves := side.Create
		if pn.phase == "delete" {
			waves = side.Delete
		}
		for li, s := range pn.series {
			pts := make(plotter.XYs, 0, len(waves))
			for _, w := range waves {
				pts = append(pts, plotter.XY{X: float64(w.Snapshots), Y: s.value(w)})
			}
			if len(pts) == 0 {
				continue
			}
			line, points, err := plotter.NewLinePoints(pts)
			if err != nil {
				return nil, err
			}
			line.Color, points.Color = sideColors[si%len(sideColors)], sideColors[si%len(sideColors)]
			points.Radius = vg.Points(1.5)
			if li > 0 {
				line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			}
			p.Add(line, points)
			for _, pt := range pts {
				top = max(top, pt.Y)
			}
			name := side.Name
			if s.name != "" {
				name += " " + s.name
			}
			p.Legend.Add(name, line)
		}
	}
	// Room above the highest point for the legend.
	p.Y.Max = 1.3 * top
	return p, nil
}
